// Focus across a redraw of the rounds: a section drawn again replaces the element that had the keyboard focus
// (a step's box, a task being typed, a sub-run's summary). `keepFocus` notes which one it was, and gives the
// focus, with the caret and the scroll of a task, to the element that replaces it.

/** A step's nested run, in its detail: its steps are not the run's own. */
const SUBRUN = ".dagmagic-subrun";

/**
 * @param {HTMLElement} root  the rounds
 * @returns {() => void} puts the focus back, once the redraw is done
 */
export function keepFocus(root) {
  const node = focusedNode(root);
  const typing = focusedDraft(root);
  const summary = focusedSummary(root);
  return () => {
    if (node) {
      const again = root.querySelector(
        `.dagmagic-round[data-round="${node.round}"] > .dagmagic-round-body > .dagmagic-graph-wrap .dagmagic-node[data-step-id="${cssEscape(node.step)}"]`,
      );
      if (again && again !== document.activeElement) /** @type {SVGElement} */ (again).focus?.();
    }
    if (typing) {
      const again = [...root.querySelectorAll("textarea[data-draft]")].find(
        (t) => t.getAttribute("data-draft") === typing.key,
      );
      if (again instanceof HTMLTextAreaElement && again !== document.activeElement) {
        again.focus();
        again.setSelectionRange(typing.start, typing.end, typing.direction);
        again.scrollTop = typing.scroll;
      }
    }
    if (summary !== null) {
      const again = [...root.querySelectorAll("details[data-subrun-key] > summary")].find(
        (s) => s.parentElement?.getAttribute("data-subrun-key") === summary,
      );
      if (again instanceof HTMLElement && again !== document.activeElement) again.focus();
    }
  };
}

/**
 * The task box the user is typing in, with the caret, so they keep both across a redraw.
 * @param {HTMLElement} root
 */
function focusedDraft(root) {
  const active = document.activeElement;
  if (!(active instanceof HTMLTextAreaElement) || !root.contains(active)) return null;
  const key = active.getAttribute("data-draft");
  if (!key) return null;
  return {
    key,
    start: active.selectionStart,
    end: active.selectionEnd,
    direction: active.selectionDirection,
    scroll: active.scrollTop,
  };
}

/**
 * The sub-run whose summary has the keyboard focus (its key), so it keeps it across a redraw.
 * @param {HTMLElement} root
 * @returns {string | null}
 */
function focusedSummary(root) {
  const active = document.activeElement;
  if (!active || !root.contains(active) || active.tagName !== "SUMMARY") return null;
  return active.parentElement?.getAttribute("data-subrun-key") ?? null;
}

/**
 * Which step has the keyboard focus, so it keeps it across a redraw.
 * @param {HTMLElement} root
 */
function focusedNode(root) {
  const active = document.activeElement;
  if (!active || !root.contains(active) || active.closest(SUBRUN)) return null;
  const node = active.closest(".dagmagic-node");
  const section = active.closest(".dagmagic-round");
  if (!node || !section) return null;
  return { round: section.getAttribute("data-round"), step: String(node.getAttribute("data-step-id")) };
}

/** @param {string} value */
function cssEscape(value) {
  return globalThis.CSS?.escape ? globalThis.CSS.escape(value) : value.replace(/["\\]/g, "\\$&");
}
