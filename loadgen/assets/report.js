// The capacity report's glue: draws the chart specs the page embeds as JSON
// (see loadgen/src/report/charts.rs) with uPlot. uPlot does the work: the
// hover legend, drag to zoom, double-click to zoom out, the ticks. This only
// sets it up, draws the marks over the data, and reads `#cursor=F` (places
// every chart's cursor at fraction F of its x range, so a screenshot shows
// hover values). Once drawn it writes what it drew onto <body> as data-*
// attributes, for the report's browser test.
(() => {
  'use strict';
  // Distinct colours, the first ten strong; none is red, which marks faults and SLOs.
  const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#e377c2',
    '#17becf', '#bcbd22', '#393b79', '#637939', '#843c39', '#7b4173', '#aec7e8',
    '#ffbb78', '#98df8a', '#c5b0d5', '#c49c94', '#f7b6d2', '#9edae5', '#dbdb8d'];
  const MARK = '#c62828';
  const LEVEL = '#555';
  const HEIGHT = 260;

  const color = i => COLORS[i % COLORS.length];

  /** A number as a person reads it: three significant digits, k and M. */
  function short(v) {
    if (v == null || Number.isNaN(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + 'M';
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + 'k';
    if (a >= 100) return Math.round(v).toString();
    if (a === 0) return '0';
    return (+v.toPrecision(3)).toString();
  }

  /** The y range: from 0 (or below, for negative data), over the data and the levels. */
  function yRange(spec) {
    return (u, min, max) => {
      if (spec.kind === 'cdf') return [0, 1];
      for (const l of spec.levels || []) max = Math.max(max ?? l.y, l.y);
      if (min == null || max == null) return [0, 1];
      const lo = Math.min(0, min);
      const hi = max > lo ? max + (max - lo) * 0.08 : lo + 1;
      return [lo, hi];
    };
  }

  /** Text on a white box, so that it stays readable over lines and grid. */
  function label(ctx, text, x, y, align, colour, px) {
    const w = ctx.measureText(text).width;
    const h = 13 * px;
    const x0 = align === 'right' ? x - w : x;
    ctx.fillStyle = 'rgba(255,255,255,0.85)';
    ctx.fillRect(x0 - 2 * px, y - h / 2, w + 4 * px, h);
    ctx.fillStyle = colour;
    ctx.textAlign = 'left';
    ctx.textBaseline = 'middle';
    ctx.fillText(text, x0, y);
  }

  /** Draws the spec's marks, levels and dots over the plotted data. */
  function overlay(spec) {
    return u => {
      const ctx = u.ctx;
      const { left, top, width, height } = u.bbox;
      const px = window.devicePixelRatio || 1;
      ctx.save();
      ctx.beginPath();
      ctx.rect(left, top, width, height);
      ctx.clip();
      ctx.font = `${11 * px}px system-ui, sans-serif`;
      ctx.lineWidth = px;
      ctx.setLineDash([5 * px, 4 * px]);
      (spec.marks || []).forEach((m, i) => {
        const x = u.valToPos(m.x, 'x', true);
        ctx.strokeStyle = MARK;
        ctx.beginPath();
        ctx.moveTo(x, top);
        ctx.lineTo(x, top + height);
        ctx.stroke();
        // Labels alternate between two heights so that close marks stay readable.
        label(ctx, m.label, x + 3 * px, top + (10 + 14 * (i % 2)) * px, 'left', MARK, px);
      });
      for (const l of spec.levels || []) {
        const y = u.valToPos(l.y, 'y', true);
        const colour = l.label.startsWith('SLO') ? MARK : LEVEL;
        ctx.strokeStyle = colour;
        ctx.beginPath();
        ctx.moveTo(left, y);
        ctx.lineTo(left + width, y);
        ctx.stroke();
        label(ctx, l.label, left + 6 * px, y, 'left', colour, px);
      }
      ctx.setLineDash([]);
      for (const d of spec.dots || []) {
        if (!u.series[d.series + 1].show) continue;
        const x = u.valToPos(d.x, 'x', true);
        const y = u.valToPos(d.y, 'y', true);
        ctx.fillStyle = color(d.series);
        ctx.beginPath();
        ctx.arc(x, y, 4 * px, 0, 2 * Math.PI);
        ctx.fill();
        // Right of the dot (left near the right edge); the first series'
        // labels above their line and the next below, so that two variants'
        // labels at the same percentile stay apart.
        const right = x < left + width * 0.8;
        const dy = (d.series % 2 ? 9 : -9) * px;
        label(ctx, d.label, right ? x + 6 * px : x - 6 * px, y + dy, right ? 'left' : 'right', color(d.series), px);
      }
      ctx.restore();
    };
  }

  function options(spec, width) {
    const xy = spec.kind === 'xy';
    const value = (u, v) => short(v);
    return {
      title: spec.title,
      width,
      height: HEIGHT,
      scales: { x: { time: false }, y: { range: yRange(spec) } },
      axes: [
        { label: spec.x_unit, labelSize: 18, values: (u, ticks) => ticks.map(short) },
        { label: spec.unit, labelSize: 18, size: 52, values: (u, ticks) => ticks.map(short) },
      ],
      series: [
        { label: spec.x_unit, value },
        ...spec.series.map((s, i) => ({
          label: s.label,
          stroke: color(i),
          width: 2,
          value,
          // Time series break where a process did not answer; the rest join
          // their points (joined x values leave nulls in between).
          spanGaps: spec.kind !== 'time',
          points: xy ? { show: true, size: 7, fill: color(i) } : { show: false },
          // A CDF holds its value until the next latency, then steps up.
          ...(spec.kind === 'cdf' ? { paths: uPlot.paths.stepped({ align: 1 }) } : {}),
        })),
      ],
      cursor: { drag: { x: true, y: false }, ...(spec.sync ? { sync: { key: spec.sync } } : {}) },
      hooks: { draw: [overlay(spec)] },
    };
  }

  const specs = JSON.parse(document.getElementById('chart-specs').textContent);
  const plots = [];
  for (const el of document.querySelectorAll('.chart[data-chart]')) {
    const spec = specs[+el.dataset.chart];
    const data = [spec.x, ...spec.series.map(s => s.values)];
    const u = new uPlot(options(spec, el.clientWidth), data, el);
    plots.push({ u, spec, el });
  }

  window.addEventListener('resize', () => {
    for (const { u, el } of plots) u.setSize({ width: el.clientWidth, height: HEIGHT });
  });

  /** `#cursor=F`: every chart's cursor at fraction F of its x range. */
  function placeCursors() {
    const f = parseFloat((location.hash.match(/cursor=([0-9.]+)/) || [])[1]);
    if (!(f >= 0 && f <= 1)) return;
    for (const { u } of plots) {
      const { min, max } = u.scales.x;
      const left = u.valToPos(min + f * (max - min), 'x');
      u.setCursor({ left, top: u.bbox.height / (window.devicePixelRatio || 1) / 2 });
    }
  }
  window.addEventListener('hashchange', placeCursors);

  /** Whether the browser drew a series: pixels of a series' colour in the plot area. */
  function drawn({ u, spec }) {
    const { left, top, width, height } = u.bbox;
    if (width < 1 || height < 1) return false;
    const px = u.ctx.getImageData(left, top, width, height).data;
    const rgb = spec.series.map((_, i) => {
      const c = parseInt(color(i).slice(1), 16);
      return [c >> 16, (c >> 8) & 255, c & 255];
    });
    let hits = 0;
    for (let i = 0; i < px.length && hits < 20; i += 4) {
      if (px[i + 3] < 128) continue;
      if (rgb.some(([r, g, b]) => Math.abs(px[i] - r) + Math.abs(px[i + 1] - g) + Math.abs(px[i + 2] - b) < 60)) hits++;
    }
    return hits >= 20;
  }

  /** Whether the legend shows the cursor's x and a value of a series there. */
  function legendFilled({ u }) {
    const values = [...u.root.querySelectorAll('.u-legend .u-value')].map(v => v.textContent.trim());
    const filled = v => v !== '' && v !== '–' && v !== '--';
    return values.length > 1 && filled(values[0]) && values.slice(1).some(filled);
  }

  window.addEventListener('load', () => {
    placeCursors();
    const body = document.body.dataset;
    body.charts = document.querySelectorAll('.uplot').length;
    body.chartsDrawn = plots.filter(drawn).length;
    body.legendsFilled = plots.filter(legendFilled).length;
  });
})();
