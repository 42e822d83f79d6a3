/** Whether a backend can work on this machine, and if not, why. */
export type Viability =
  | {
      /** It can. */
      viable: true;
    }
  | {
      /** It cannot. */
      viable: false;
      /** Why not, and what would fix it where something would. */
      reason: string;
    };

/** The answer of a backend that can work here. */
export const VIABLE: Viability = Object.freeze({ viable: true });

/** The answer of a backend that cannot work here, with the reason. */
export function notViable(reason: string): Viability {
  return { viable: false, reason };
}
