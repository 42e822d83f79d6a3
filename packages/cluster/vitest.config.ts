import { defineProject } from "vitest/config";

export default defineProject({
  test: { name: "cluster", include: ["test/**/*.test.ts"], testTimeout: 60_000 },
});
