import { defineConfig } from "vitest/config";

export default defineConfig({
  // test/bundle.test.js imports the built bundle from ../dagmagic/static/.
  server: { fs: { allow: [".."] } },
  test: {
    environment: "jsdom",
    include: ["test/**/*.test.js"],
    restoreMocks: true,
  },
});
