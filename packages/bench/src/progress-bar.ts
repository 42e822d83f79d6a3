/** What a progress bar writes to: a terminal, or anything that says it is not one. */
export interface ProgressStream {
  /** Writes text. */
  write(s: string): unknown;
  /** Whether it is a terminal: the bar redraws in place only there. */
  isTTY?: boolean;
  /** The terminal's width. */
  columns?: number;
}

/**
 * One line redrawn in place on a terminal; on anything else (a pipe, a CI
 * log) a line at each tenth, so that a log still shows where a run stopped.
 */
export class ProgressBar {
  private done = 0;
  private lastTenth = -1;

  constructor(
    private readonly total: number,
    private readonly stream: ProgressStream = process.stderr,
  ) {}

  /** Marks one step done; `label` says what is running next. */
  tick(label: string): void {
    this.done = Math.min(this.total, this.done + 1);
    this.show(label);
  }

  /** Redraws the bar with `label` beside it. */
  show(label: string): void {
    const fraction = this.total === 0 ? 1 : this.done / this.total;
    const width = 30;
    const filled = Math.round(fraction * width);
    const bar = `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${String(Math.round(fraction * 100)).padStart(3)}% ${label}`;
    if (this.stream.isTTY) {
      const columns = this.stream.columns ?? 80;
      this.stream.write(`\r${bar.slice(0, columns - 1).padEnd(columns - 1)}`);
    } else if (Math.floor(fraction * 10) !== this.lastTenth) {
      this.lastTenth = Math.floor(fraction * 10);
      this.stream.write(`${bar}\n`);
    }
  }

  /** Clears the terminal line so that what follows starts clean. */
  finish(): void {
    if (this.stream.isTTY) this.stream.write(`\r${" ".repeat((this.stream.columns ?? 80) - 1)}\r`);
  }
}
