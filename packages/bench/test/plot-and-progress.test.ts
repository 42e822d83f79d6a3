import { describe, expect, it } from "vitest";
import { ProgressBar, parseSize, sizeLabel, svgLinePlot } from "../src/index.js";

describe("svgLinePlot", () => {
  const svg = svgLinePlot(
    [
      {
        name: "a<b",
        points: [
          { x: 8, y: 0.5 },
          { x: 1024, y: 2 },
          { x: 1 << 20, y: 4 },
        ],
      },
      {
        name: "flat",
        points: [
          { x: 8, y: 1 },
          { x: 1 << 20, y: Number.NaN },
        ],
      },
    ],
    { title: "t", xLabel: "size", yLabel: "GB/s", xTick: sizeLabel, width: 800, height: 400 },
  );

  it("draws each series as a polyline in the plot box, x on a log2 scale", () => {
    const lines = [...svg.matchAll(/<polyline [^>]*points="([^"]*)"/g)].map((m) => m[1]!.split(" ").map((p) => p.split(",").map(Number)));
    expect(lines).toHaveLength(2);
    const [a, flat] = lines as [number[][], number[][]];
    expect(a).toHaveLength(3);
    expect(flat).toHaveLength(1);
    // margins 70 left, 190 right, 40 top, 60 bottom: plot 540 x 300
    expect(a[0]![0]).toBeCloseTo(70);
    expect(a[2]![0]).toBeCloseTo(610);
    expect(a[1]![0]).toBeCloseTo(70 + (7 / 17) * 540, 0);
    // y: 0 at the bottom (340), the top tick (5) at 40
    expect(a[2]![1]).toBeCloseTo(340 - (4 / 5) * 300, 0);
    for (const [x, y] of [...a, ...flat]) {
      expect(x).toBeGreaterThanOrEqual(70);
      expect(x).toBeLessThanOrEqual(610);
      expect(y).toBeGreaterThanOrEqual(40);
      expect(y).toBeLessThanOrEqual(340);
    }
  });

  it("puts a log y axis a decade a tick", () => {
    const log = svgLinePlot(
      [
        {
          name: "s",
          points: [
            { x: 8, y: 0.001 },
            { x: 64, y: 0.1 },
            { x: 512, y: 10 },
            { x: 4096, y: 0 },
          ],
        },
      ],
      {
        title: "t",
        xLabel: "x",
        yLabel: "y",
        xTick: sizeLabel,
        yLog: true,
        width: 800,
        height: 400,
      },
    );
    const points = log
      .match(/<polyline [^>]*points="([^"]*)"/)![1]!
      .split(" ")
      .map((p) => p.split(",").map(Number));
    expect(points.map(([, y]) => y)).toEqual([340, 190, 40]);
    for (const tick of ["0.001", "0.01", "0.1", "1", "10"]) expect(log).toContain(`>${tick}</text>`);
  });

  it("labels the axes and the legend, escaped", () => {
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg).toContain(">a&lt;b</text>");
    expect(svg).not.toContain("a<b");
    for (const tick of ["8 B", "1 KiB", "1 MiB"]) expect(svg).toContain(`>${tick}</text>`);
    expect(svg.match(/<g /g)).toHaveLength(2);
    expect(svg.match(/<g /g)?.length).toBe(svg.match(/<\/g>/g)?.length);
  });
});

describe("ProgressBar", () => {
  it("redraws one line on a terminal", () => {
    const out: string[] = [];
    const bar = new ProgressBar(4, { write: (s) => out.push(s), isTTY: true, columns: 60 });
    bar.tick("one");
    bar.tick("two");
    bar.finish();
    expect(out[0]).toMatch(/^\r\[#{8}-{22}\] {2}25% one +$/);
    expect(out[1]).toMatch(/^\r\[#{15}-{15}\] {2}50% two/);
    expect(out.every((s) => s.startsWith("\r") && s.length <= 60 + 2)).toBe(true);
  });

  it("writes the first step and a line per tenth elsewhere", () => {
    const out: string[] = [];
    const bar = new ProgressBar(100, { write: (s) => out.push(s) });
    for (let i = 0; i < 100; i++) bar.tick(`step ${i}`);
    expect(out).toHaveLength(11);
    expect(out[0]).toMatch(/^\[-{30}\] {3}1% step 0\n$/);
    expect(out.at(-1)).toMatch(/^\[#{30}\] 100% step 99\n$/);
  });
});

describe("sizes", () => {
  it("parses and prints binary units", () => {
    expect(["8", "64K", "1M", "2GiB", "16MB"].map(parseSize)).toEqual([8, 65536, 1 << 20, 2 * 2 ** 30, 16 << 20]);
    expect(() => parseSize("12Q")).toThrow(/not a size/);
    expect([8, 65536, 1 << 20, 1536].map(sizeLabel)).toEqual(["8 B", "64 KiB", "1 MiB", "1536 B"]);
  });
});
