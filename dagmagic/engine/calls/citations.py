"""Citation checks: find citation-like strings in a step's result and have the smart model judge them.

Only results that hold citations are checked (statutes, cases, regulations, DOIs, RFCs, section and
article references); a failed check re-runs the step once with the reviewer's feedback.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from dagmagic.llm import ChatModel, structured_llm_call

__all__ = ["CITATION_PATTERNS", "CitationVerdict", "extract_citations", "verify_citations"]

CITATION_PATTERNS: dict[str, re.Pattern[str]] = {
    "article": re.compile(r"\bArt(?:icle|\.)\s*\d+[a-z]?(?:\s*\(\d+\))*(?:\s+[A-Z][A-Za-z]{1,12})?"),
    "section": re.compile(
        r"§{1,2}\s*\d+[a-z]?(?:\s*\(\w+\))*(?:\s+[A-Z][A-Za-z]{1,10})?|\bSec(?:tion|\.)\s*\d+[\w.()]*"
    ),
    "us_code": re.compile(r"\b\d+\s+(?:U\.S\.C\.|C\.F\.R\.)\s*§*\s*\d+[\w.()-]*"),
    "regulation": re.compile(r"\b(?:Regulation|Directive)\s+\((?:EU|EC|EEC)\)\s+(?:No\s+)?\d+/\d+"),
    "case": re.compile(r"\b[A-Z][\w.&'-]+(?:\s+[A-Z][\w.&'-]+)*\s+v\.?\s+[A-Z][\w.&'-]+(?:\s+[A-Z][\w.&'-]+)*"),
    "doi": re.compile(r"\b10\.\d{4,9}/[^\s\"<>]+"),
    "rfc": re.compile(r"\bRFC\s*\d{3,5}\b"),
}


class CitationVerdict(BaseModel):
    """The smart model's judgement of a step's citations."""

    valid: bool = Field(description="True when every citation exists and supports what it is cited for.")
    problems: list[str] = Field(default_factory=list, description="Each wrong or doubtful citation, and why.")
    feedback: str = Field("", description="What the step should correct, addressed to its author.")


def extract_citations(text: str) -> list[str]:
    """Citation-like strings in ``text``, in order of appearance, without repeats."""
    matches = sorted(
        (match.start(), -match.end(), _clean(match.group(0)))
        for pattern in CITATION_PATTERNS.values()
        for match in pattern.finditer(text)
    )
    kept: list[tuple[int, int, str]] = []
    for start, negative_end, citation in matches:
        end = -negative_end
        # a match inside a longer one is part of it, not another citation ("§ 1983" in "42 U.S.C. § 1983")
        if not any(s <= start and end <= e for s, e, _ in kept):
            kept.append((start, end, citation))
    return list(dict.fromkeys(citation for _, _, citation in kept))


def _clean(found: str) -> str:
    """A match without trailing punctuation, nor a closing parenthesis it did not open ("(doi:10.1/x)")."""
    text = found.strip().rstrip(".,;:")
    while text.endswith(")") and text.count(")") > text.count("("):
        text = text[:-1].rstrip(".,;:")
    return text


async def verify_citations(
    model: ChatModel, task: str, result: str, citations: list[str], *, round: int, step_id: str
) -> CitationVerdict:
    """The smart model's verdict; ``StructuredOutputError`` when it cannot be read (the step then keeps its
    result, marked not verified: a check never blocks a step).
    """
    listed = "\n".join(f"- {c}" for c in citations)
    messages = [
        {
            "role": "system",
            "content": "You check citations. For each one, say whether it exists and supports the claim it is "
            "attached to. Be strict about numbers (article, section, year) and names.",
        },
        {"role": "user", "content": f"Task: {task}\n\nAnswer:\n{result}\n\nCitations found:\n{listed}"},
    ]
    outcome = await structured_llm_call(
        model,
        messages,
        CitationVerdict,
        purpose="citation_check",
        round=round,
        step_id=step_id,
        temperature=0.0,
    )
    verdict: CitationVerdict = outcome.value
    return verdict
