/** One line of a plot: y against x, points in x order. */
export interface PlotSeries {
  /** Its name in the legend. */
  name: string;
  /** Its points, in x order. */
  points: readonly {
    /** The x value (plotted on a log2 axis). */
    x: number;
    /** The y value. */
    y: number;
  }[];
}

/** How a plot looks. */
export interface PlotOptions {
  /** Above the plot. */
  title: string;
  /** Under the x axis. */
  xLabel: string;
  /** Beside the y axis. */
  yLabel: string;
  /** Tick text for an x value (the x axis is log2). */
  xTick(x: number): string;
  /** A log10 y axis, one tick a decade: for values that span several. */
  yLog?: boolean;
  /** Pixels. */
  width?: number;
  /** Pixels. */
  height?: number;
}

// Distinct under the common colour blindnesses (Okabe and Ito).
const COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442", "#999999"];

const escapeXml = (s: string) => s.replace(/[<>&"']/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" })[c]!);

/** A round number at or above `v`, for the top of the y axis. */
function niceCeiling(v: number): number {
  if (!(v > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= v) return m * step;
  return 10 * step;
}

/** A self-contained SVG line chart with a log2 x axis and a y axis linear from 0 or log10. */
export function svgLinePlot(series: readonly PlotSeries[], options: PlotOptions): string {
  const width = options.width ?? 860;
  const height = options.height ?? 480;
  const margin = { left: 70, right: 190, top: 40, bottom: 60 };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  const ys = series.flatMap((s) => s.points.map((p) => p.y)).filter((y) => Number.isFinite(y) && (!options.yLog || y > 0));
  const lx = (x: number) => Math.log2(x);
  const x0 = xs.length ? lx(xs[0]!) : 0;
  const x1 = xs.length > 1 ? lx(xs[xs.length - 1]!) : x0 + 1;
  const yTop = niceCeiling(Math.max(0, ...ys));
  const decades = options.yLog ? [Math.floor(Math.log10(Math.min(...ys, 1))), Math.ceil(Math.log10(Math.max(...ys, 1)))] : [0, 0];
  if (decades[1] === decades[0]) decades[1]! += 1;
  const yFraction = (y: number) => (options.yLog ? (Math.log10(y) - decades[0]!) / (decades[1]! - decades[0]!) : y / yTop);
  const yTicks = options.yLog
    ? Array.from({ length: decades[1]! - decades[0]! + 1 }, (_, i) => 10 ** (decades[0]! + i))
    : Array.from({ length: 6 }, (_, i) => (yTop * i) / 5);
  const px = (x: number) => margin.left + ((lx(x) - x0) / (x1 - x0)) * plotW;
  const py = (y: number) => margin.top + plotH - yFraction(y) * plotH;
  const f = (n: number) => n.toFixed(1);

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
  );
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="${width / 2}" y="22" text-anchor="middle" font-size="15">${escapeXml(options.title)}</text>`);
  for (const y of yTicks) {
    out.push(`<line x1="${margin.left}" x2="${margin.left + plotW}" y1="${f(py(y))}" y2="${f(py(y))}" stroke="#ddd"/>`);
    out.push(`<text x="${margin.left - 8}" y="${f(py(y) + 4)}" text-anchor="end">${Number(y.toPrecision(3))}</text>`);
  }
  for (const x of xs) {
    out.push(`<line x1="${f(px(x))}" x2="${f(px(x))}" y1="${margin.top + plotH}" y2="${margin.top + plotH + 5}" stroke="#333"/>`);
    out.push(`<text x="${f(px(x))}" y="${margin.top + plotH + 20}" text-anchor="middle">${escapeXml(options.xTick(x))}</text>`);
  }
  out.push(`<rect x="${margin.left}" y="${margin.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${margin.left + plotW / 2}" y="${height - 15}" text-anchor="middle">${escapeXml(options.xLabel)}</text>`);
  out.push(`<text transform="translate(18 ${margin.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(options.yLabel)}</text>`);
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length]!;
    const points = s.points.filter((p) => Number.isFinite(p.y) && (!options.yLog || p.y > 0));
    const coords = points.map((p) => `${f(px(p.x))},${f(py(p.y))}`);
    out.push(`<g data-series="${escapeXml(s.name)}">`);
    out.push(`<polyline fill="none" stroke="${colour}" stroke-width="2" points="${coords.join(" ")}"/>`);
    for (const c of coords) {
      const [cx, cy] = c.split(",");
      out.push(`<circle cx="${cx}" cy="${cy}" r="3" fill="${colour}"/>`);
    }
    const ly = margin.top + 10 + i * 20;
    const lx0 = margin.left + plotW + 15;
    out.push(`<line x1="${lx0}" x2="${lx0 + 20}" y1="${ly}" y2="${ly}" stroke="${colour}" stroke-width="2"/>`);
    out.push(`<text x="${lx0 + 26}" y="${ly + 4}">${escapeXml(s.name)}</text>`);
    out.push("</g>");
  });
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
