// The kernel learns from the widget's model that a front end drawing widgets holds it (a headless execution
// never makes one): Python then keeps the widget in the notebook's outputs, else their static views.
import { afterEach, describe, expect, it } from "vitest";
import widget from "../src/index.js";
import { fakeModel, sampleState, unmountAll } from "./fixtures.js";

afterEach(unmountAll);

describe("front end", () => {
  it("tells the kernel once, when the model is made", () => {
    const model = fakeModel(sampleState());
    const definition = widget();
    const dispose = definition.initialize({ model: /** @type {any} */ (model) });
    expect(model.sent).toEqual([{ kind: "dagmagic-front-end" }]);
    dispose();
  });
});
