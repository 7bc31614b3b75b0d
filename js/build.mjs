// Bundles src/ into ../dagmagic/static/widget.{js,css}. Output is deterministic (no dates, no banners, no
// source maps with absolute paths), so CI can rebuild and `git diff --exit-code dagmagic/static` catches a
// stale bundle. `--watch` rebuilds on change (with ANYWIDGET_HMR=1 the notebook reloads the widget).

import * as esbuild from "esbuild";
import { readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
const outdir = join(here, "..", "dagmagic", "static");
const watch = process.argv.includes("--watch");

/** @type {import("esbuild").BuildOptions} */
const common = {
  absWorkingDir: here,
  bundle: true,
  minify: true,
  target: ["es2020", "chrome100", "firefox100", "safari15"],
  legalComments: "eof", // keep the bundled libraries' license notices
  logLevel: "warning",
  charset: "utf8",
};

const builds = [
  { ...common, entryPoints: ["src/index.js"], outfile: join(outdir, "widget.js"), format: "esm", platform: "browser" },
  {
    ...common,
    entryPoints: ["src/experiment.js"],
    outfile: join(outdir, "experiment.js"),
    format: "esm",
    platform: "browser",
  },
  {
    ...common,
    entryPoints: ["src/compare.js"],
    outfile: join(outdir, "compare.js"),
    format: "esm",
    platform: "browser",
  },
  { ...common, entryPoints: ["src/widget.css"], outfile: join(outdir, "widget.css") },
];

function report() {
  for (const name of ["widget.js", "experiment.js", "compare.js", "widget.css"]) {
    const bytes = readFileSync(join(outdir, name));
    const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
    console.log(
      `${relative(here, join(outdir, name))}  ${kb(bytes.length)} (gzip ${kb(gzipSync(bytes, { level: 9 }).length)})`,
    );
  }
}

if (watch) {
  const contexts = await Promise.all(
    builds.map((options) =>
      esbuild.context({
        ...options,
        plugins: [
          {
            name: "log",
            setup: (b) =>
              b.onEnd(
                (r) => r.errors.length || console.log(`[dagmagic] rebuilt ${relative(here, String(options.outfile))}`),
              ),
          },
        ],
      }),
    ),
  );
  await Promise.all(contexts.map((ctx) => ctx.watch()));
  console.log("[dagmagic] watching src/ (Ctrl-C to stop)");
} else {
  await Promise.all(builds.map((options) => esbuild.build(options)));
  report();
}
