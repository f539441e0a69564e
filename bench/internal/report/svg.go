package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
)

// Chart is a grouped bar chart of ratios to a baseline: one group per
// workload, one bar per implementation in the group. The value axis is
// logarithmic (base 2) and centred on 1, the baseline, so a bar rises for
// "better than the baseline" and hangs down for "worse", and 2× and 0.5×
// are the same distance from it.
type Chart struct {
	Title    string
	Subtitle string
	Groups   []string // x-axis groups, in order
	Series   []string // bar series (legend), in order within each group
	Points   []Point
}

// Point is one bar. Points whose Group or Series is not listed in the
// chart, or whose Value is not a positive finite number, are not drawn.
type Point struct {
	Group, Series string
	Value         float64
}

// Layout, in SVG user units.
const (
	barWidth    = 22
	groupGap    = 26
	marginLeft  = 64
	marginRight = 16
	plotTop     = 96
	plotHeight  = 300
	labelsBelow = 56
)

// palette colours the series in order (Okabe–Ito, distinguishable with
// the common colour-vision deficiencies).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

// WriteSVG draws c as a standalone SVG document. Every drawn bar is a
// <rect class="bar"> carrying data-group, data-series and data-value
// attributes, so the chart can be checked by machine as well as by eye.
func WriteSVG(w io.Writer, c Chart) error {
	groupIndex := index(c.Groups)
	seriesIndex := index(c.Series)
	var pts []Point
	lo, hi := 0.25, 4.0
	for _, p := range c.Points {
		_, okG := groupIndex[p.Group]
		_, okS := seriesIndex[p.Series]
		if !okG || !okS || !(p.Value > 0) || math.IsInf(p.Value, 0) {
			continue
		}
		pts = append(pts, p)
		lo = math.Min(lo, math.Exp2(math.Floor(math.Log2(p.Value))))
		hi = math.Max(hi, math.Exp2(math.Ceil(math.Log2(p.Value))))
	}
	groupWidth := float64(max(1, len(c.Series))*barWidth + groupGap)
	width := marginLeft + float64(len(c.Groups))*groupWidth + marginRight
	width = math.Max(width, 480)
	// Wide enough for the subtitle, at about 5.5 units per character of
	// its 11-unit font.
	width = math.Max(width, 24+5.5*float64(len([]rune(c.Subtitle))))
	height := float64(plotTop + plotHeight + labelsBelow)
	logLo, logHi := math.Log2(lo), math.Log2(hi)
	y := func(v float64) float64 {
		return plotTop + (logHi-math.Log2(v))/(logHi-logLo)*plotHeight
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	text(&b, 12, 22, 15, "start", "bold", c.Title)
	text(&b, 12, 40, 11, "start", "", c.Subtitle)

	// Legend.
	lx := 12.0
	for i, s := range c.Series {
		fmt.Fprintf(&b, `<rect x="%.1f" y="52" width="10" height="10" fill="%s"/>`+"\n", lx, palette[i%len(palette)])
		text(&b, lx+14, 61, 11, "start", "", s)
		lx += 24 + 7*float64(len([]rune(s)))
	}

	// Grid: one line per power of two, the baseline heavier.
	for e := int(logLo); e <= int(logHi); e++ {
		v := math.Exp2(float64(e))
		yy := y(v)
		stroke, sw := "#dddddd", 1.0
		if e == 0 {
			stroke, sw = "#333333", 1.5
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", marginLeft, yy, width-marginRight, yy, stroke, sw)
		text(&b, marginLeft-6, yy+4, 10, "end", "", ratioLabel(v))
	}

	// Group labels.
	for i, g := range c.Groups {
		cx := marginLeft + float64(i)*groupWidth + groupGap/2 + float64(len(c.Series)*barWidth)/2
		text(&b, cx, plotTop+plotHeight+30, 11, "middle", "bold", g)
	}

	// Bars, with their values.
	base := y(1)
	for _, p := range pts {
		gi, si := groupIndex[p.Group], seriesIndex[p.Series]
		x := marginLeft + float64(gi)*groupWidth + groupGap/2 + float64(si*barWidth)
		top, bottom := y(p.Value), base
		if top > bottom {
			top, bottom = bottom, top
		}
		h := math.Max(bottom-top, 1)
		fmt.Fprintf(&b, `<rect class="bar" data-group="%s" data-series="%s" data-value="%g" x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
			attr(p.Group), attr(p.Series), p.Value, x+1, top, barWidth-2, h, palette[si%len(palette)],
			escape(fmt.Sprintf("%s, %s: %s", p.Group, p.Series, ratioLabel(p.Value))))
		ly := top - 3
		if p.Value < 1 {
			ly = bottom + 9
		}
		text(&b, x+barWidth/2, ly, 8, "middle", "", valueLabel(p.Value))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func index(names []string) map[string]int {
	m := make(map[string]int, len(names))
	for i, n := range names {
		if _, dup := m[n]; !dup {
			m[n] = i
		}
	}
	return m
}

func text(b *bytes.Buffer, x, y float64, size int, anchor, weight, s string) {
	if s == "" {
		return
	}
	fw := ""
	if weight != "" {
		fw = fmt.Sprintf(` font-weight="%s"`, weight)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s"%s>%s</text>`+"\n", x, y, size, anchor, fw, escape(s))
}

func escape(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to a buffer: cannot fail
	return b.String()
}

func attr(s string) string { return escape(s) }

// ratioLabel formats a ratio: "16×", "1×", "1.5×", and below 1 as a
// fraction when it is one over a whole number ("1/4×"), else "0.37×"
// (below 0.01, with two significant digits: "0.0043×").
func ratioLabel(v float64) string {
	if v > 0 && v < 1 {
		if inv := 1 / v; math.Abs(inv-math.Round(inv)) < 1e-9 {
			return fmt.Sprintf("1/%.0f×", inv)
		}
	}
	return trim(v, ratioDecimals(v)) + "×"
}

// valueLabel formats a bar's value with two significant digits or so:
// "12", "2.5", "0.46", "0.0043".
func valueLabel(v float64) string {
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return trim(v, 1)
	}
	return trim(v, ratioDecimals(v))
}
