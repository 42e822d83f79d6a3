import { defineProject } from "vitest/config";

export default defineProject({
  test: { name: "transport-shm", include: ["test/**/*.test.ts"], testTimeout: 60_000 },
});
