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

/** The views of the widget, oldest first: only the newest shows. */
function createViews() {
  /** @type {HTMLElement[]} */
  const views = [];
  return (/** @type {HTMLElement} */ root) => {
    for (const older of views) older.hidden = true;
    views.push(root);
    return () => {
      const at = views.indexOf(root);
      if (at >= 0) views.splice(at, 1);
      const newest = views[views.length - 1];
      if (newest) newest.hidden = false;
    };
  };
}
