// What the views of one widget share: made once per widget model in `initialize` (index.js), gone with it.
// Nothing here is shared with another widget on the page.
//
// A `%%dag` cell shows its run live while it runs, then again as the cell's value: two views of one model. The
// newer hides the older, so the cell shows one widget, and opens with the step and rounds the user left open.
// The whole texts fetched for cut results and observations are kept here too, for every view to show.

/**
 * @typedef {{round: number, step: string}} StepRef
 */

/**
 * @typedef {object} RunMemory  what the user opened and fetched in the run the views show
 * @property {(runId: string) => void} follow  the views show run `runId` (a resumed run has another id): the
 *   texts fetched for the run shown before are forgotten
 * @property {() => string | null} runId
 * @property {(selected: StepRef | null, expanded: Map<number, boolean>) => void} remember  the user's choice
 * @property {() => {selected: StepRef | null, expanded: Map<number, boolean>} | null} recall  the last choice made in
 *   any view of this widget (null before any)
 * @property {(key: string, cut: string) => string | undefined} wholeText  the whole text fetched for a cut one
 *   (by `textKey`), while the step still shows that cut text
 * @property {(runId: string, round: number, key: string, cut: string, text: string) => void} keepText  a whole text
 *   Python sent for run `runId`: every view redraws its round
 * @property {(redrawRound: (round: number) => void) => () => void} subscribe  a view's redraw of one round; returns
 *   what unsubscribes it
 */

/**
 * @typedef {object} Shared
 * @property {RunMemory} memory
 * @property {(root: HTMLElement) => () => void} show  a new view: hides the older ones; returns what removes it
 *   (the newest one left shows again)
 */

/** @returns {Shared} */
export function createShared() {
  return { memory: createRunMemory(), show: createViews() };
}

/** @returns {RunMemory} */
function createRunMemory() {
  /** @type {string | null} */
  let shown = null;
  /** @type {{selected: StepRef | null, expanded: Map<number, boolean>} | null} */
  let choice = null;
  /** @type {Map<string, {cut: string, text: string}>} by `textKey` */
  const texts = new Map();
  /** @type {Set<(round: number) => void>} */
  const views = new Set();

  return {
    follow(runId) {
      if (runId === shown) return;
      shown = runId;
      texts.clear();
    },
    runId: () => shown,
    remember(selected, expanded) {
      choice = { selected, expanded: new Map(expanded) };
    },
    recall: () => (choice ? { selected: choice.selected, expanded: new Map(choice.expanded) } : null),
    wholeText(key, cut) {
      const whole = texts.get(key);
      return whole && whole.cut === cut ? whole.text : undefined;
    },
    keepText(runId, round, key, cut, text) {
      if (runId !== shown) return; // asked before the view moved on to another run
      texts.set(key, { cut, text });
      for (const redrawRound of views) redrawRound(round);
    },
    subscribe(redrawRound) {
      views.add(redrawRound);
      return () => views.delete(redrawRound);
    },
  };
}

/**
 * Hides or shows a view, and with it the host's output that holds it: JupyterLab and Notebook 7 draw an output's
 * prompt ("[3]:") beside it, which would stay behind, empty, under a hidden view.
 * @param {WeakMap<HTMLElement, HTMLElement>} outputs  the host output hidden with each view (found while on the page)
 * @param {HTMLElement} root
 * @param {boolean} hidden
 */
function setHidden(outputs, root, hidden) {
  root.hidden = hidden;
  const output = root.closest(".jp-OutputArea-child") ?? outputs.get(root);
  if (!(output instanceof HTMLElement)) return;
  // a style, not the attribute: the host's stylesheet sets the output's display, which would win over [hidden]
  output.style.display = hidden ? "none" : "";
  if (hidden) outputs.set(root, output);
  else outputs.delete(root);
}

/** The views of the widget, oldest first: only the newest shows. */
function createViews() {
  /** @type {HTMLElement[]} */
  const views = [];
  /** @type {WeakMap<HTMLElement, HTMLElement>} */
  const outputs = new WeakMap();
  return (/** @type {HTMLElement} */ root) => {
    for (const older of views) setHidden(outputs, older, true);
    views.push(root);
    return () => {
      const at = views.indexOf(root);
      if (at >= 0) views.splice(at, 1);
      // the view goes (its output updated to something else, which must show): its output shows again
      setHidden(outputs, root, false);
      const newest = views[views.length - 1];
      if (newest) setHidden(outputs, newest, false);
    };
  };
}
