/** Whether a backend can work on this machine, and if not, why. */
export type Viability = { viable: true } | { viable: false; reason: string };

export const VIABLE: Viability = Object.freeze({ viable: true });

export function notViable(reason: string): Viability {
  return { viable: false, reason };
}
