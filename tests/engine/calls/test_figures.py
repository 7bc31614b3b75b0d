"""Numbers read as a text writes them: value, precision, and whether the answer checks read them."""

from __future__ import annotations

from dagmagic.engine.calls.figures import figures, held, source_values


def test_what_figures_reads() -> None:
    read = {
        figure.text: (figure.value, figure.unit, figure.checked)
        for figure in figures("12.48 million, 2,100,000, 7%, 2024, 42 and $1500")
    }
    assert read == {
        "12.48 million": (12_480_000.0, 10_000.0, True),
        "2,100,000": (2_100_000.0, 100_000.0, True),
        "7%": (7.0, 1.0, True),
        "2024": (2024.0, 1.0, False),
        "42": (42.0, 1.0, False),
        "1500": (1500.0, 100.0, True),
    }


def test_source_values_read_every_meaning_and_held_allows_one_unit() -> None:
    values = source_values(["Paris: 3,878,100 (0.057 of France), pop=2102650; 12.48 million"])
    (rounded,) = figures("3.9 million")
    (share,) = figures("5.7%")
    (scaled,) = figures("12,480,000")
    (cut,) = figures("2,100,000")
    assert all(held(figure, values) for figure in (rounded, share, scaled, cut))
    (invented,) = figures("37,440,000")
    assert not held(invented, values)
