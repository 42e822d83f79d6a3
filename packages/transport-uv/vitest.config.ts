import { defineProject } from "vitest/config";

export default defineProject({
  test: { name: "transport-uv", include: ["test/**/*.test.ts"], testTimeout: 60_000 },
});
