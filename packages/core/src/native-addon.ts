import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ErrorCode, TensorPipeError } from "./errors.js";

/** Where a package's addon may be: built from source here, or shipped prebuilt for this platform. */
export function addonCandidates(packageRoot: string, name: string): string[] {
  return [join(packageRoot, "build", "Release", `${name}.node`), join(packageRoot, "prebuilds", `${process.platform}-${process.arch}`, `${name}.node`)];
}

/** What to do when no binary of `name` loads: says what was tried and how to build one. */
function noBinaryError(packageRoot: string, name: string, failures: string[]): TensorPipeError {
  const platform = `${process.platform}-${process.arch}`;
  let shipped: string[] = [];
  try {
    shipped = readdirSync(join(packageRoot, "prebuilds"));
  } catch {
    // a source checkout has none
  }
  const others = shipped.filter((p) => p !== platform);
  const tried = failures.length
    ? `the binary there did not load (${failures.join("; ")})`
    : shipped.includes(platform)
      ? `prebuilds/${platform} has no ${name}.node (the package was unpacked incompletely or changed since)`
      : `there is no prebuilt binary for ${platform}${others.length ? ` (this package has ${others.join(", ")})` : ""}`;
  return new TensorPipeError(
    ErrorCode.NOT_VIABLE,
    `${name}.node: ${tried}. Build it from source (needs cmake and a C++17 compiler): ` +
      `cd ${packageRoot} && npm install --no-save cmake-js node-addon-api @tensorpipe/native-common && npx cmake-js compile`,
  );
}

/**
 * Loads a package's native addon once, on first use: its own build if there
 * is one, else the prebuilt binary for this platform. A missing or broken
 * binary is reported (for isViable()) with the fix, never thrown at import.
 * `base` is the calling module's URL, one directory below the package root.
 */
export function nativeAddonLoader<T>(
  base: string | URL,
  name: string,
): () => {
  /** The addon, when it loaded. */
  addon?: T;
  /** Why it did not, with how to build one. */
  error?: Error;
} {
  let loaded: { addon?: T; error?: Error } | undefined;
  return () => {
    if (!loaded) {
      const packageRoot = dirname(dirname(fileURLToPath(base)));
      const require = createRequire(base);
      const failures: string[] = [];
      for (const path of addonCandidates(packageRoot, name)) {
        if (!existsSync(path)) continue;
        try {
          loaded = { addon: require(path) as T };
          break;
        } catch (e) {
          failures.push(`${path}: ${(e as Error).message.split("\n")[0]}`);
        }
      }
      loaded ??= { error: noBinaryError(packageRoot, name, failures) };
    }
    return loaded;
  };
}
