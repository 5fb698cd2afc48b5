package replay

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"time"
)

// maxChartBins bounds the bars of the chart, so that each stays a few
// pixels wide: longer traffic is drawn in bins of several minutes.
const maxChartBins = 120

// chart is the inline SVG of denials per bin, old and new side by side:
// bars, since a bin is a count, not a sample of something continuous (a
// line between two bins would read as a gradual change).
type chart struct {
	Width, Height int
	Bars          []bar
	Ticks         []tick // under the bars, at most maxTicks
	Max           int
	BinMinutes    int
	From, To      string
}

// maxTicks bounds the time labels under the chart.
const maxTicks = 8

// tick is a time label under the chart, centred on its bin.
type tick struct {
	X    float64
	Text string
}

// bar is one rectangle of the chart, with its tooltip.
type bar struct {
	Class      string // old or new
	X, Y, W, H float64
	Title      string
}

// newChart bins the report's minutes from its first to its last request.
func newChart(rep *Report) chart {
	c := chart{Width: 800, Height: 200, BinMinutes: 1, From: stamp(rep.From), To: stamp(rep.To)}
	if rep.Requests == 0 {
		return c // the page says "No traffic."
	}
	first := unixMinute(rep.From)
	last := max(unixMinute(rep.To), first)
	span := int(last-first) + 1
	c.BinMinutes = (span + maxChartBins - 1) / maxChartBins
	bins := (span + c.BinMinutes - 1) / c.BinMinutes
	denied := make([][2]int, bins) // old and new
	for _, m := range rep.Minutes {
		i := int(unixMinute(m.Minute)-first) / c.BinMinutes
		denied[i][0] += m.OldDenied
		denied[i][1] += m.NewDenied
		c.Max = max(c.Max, denied[i][0], denied[i][1])
	}
	// Each bin is a slot of the width: old on the left, new on the right,
	// centred, with at least a fifth of the slot between bins, and no
	// wider than maxBarWidth each, so that a short replay does not draw
	// two bars as wide as the chart.
	const maxBarWidth = 24
	slot := float64(c.Width) / float64(bins)
	w := min(slot*0.4, maxBarWidth)
	pad := (slot - 2*w) / 2
	top := float64(max(c.Max, 1))
	every := (bins + maxTicks - 1) / maxTicks
	for i := range bins {
		start := time.Unix((first+int64(i*c.BinMinutes))*60, 0).UTC()
		at := start.Format("2006-01-02 15:04")
		if i%every == 0 {
			c.Ticks = append(c.Ticks, tick{X: (float64(i) + 0.5) * slot, Text: start.Format("15:04")})
		}
		for j, n := range denied[i] {
			if n == 0 {
				continue
			}
			class := [2]string{"old", "new"}[j]
			h := float64(n) * float64(c.Height) / top
			c.Bars = append(c.Bars, bar{Class: class, X: float64(i)*slot + pad + float64(j)*w, Y: float64(c.Height) - h, W: w, H: h,
				Title: fmt.Sprintf("%s UTC: %s, %d denied", at, class, n)})
		}
	}
	return c
}

// reportHTML is the page WriteHTML fills in.
//
//go:embed report.html
var reportHTML embed.FS

var htmlReport = template.Must(template.New("report.html").Funcs(template.FuncMap{
	"stamp": stamp, "delta": delta, "orNone": orNone, "why": exampleWhy, "plural": plural,
	"ruleName": ruleName, "cells": RuleDiff.cells, "share": ValueChange.share, "signed": signed,
	"add": func(a, b int) int { return a + b },
}).ParseFS(reportHTML, "report.html"))

// WriteHTML writes the report as one HTML page with no external assets:
// the tables of WriteText and a chart (inline SVG) of the denials per
// minute under each set.
func (rep *Report) WriteHTML(w io.Writer) error {
	active, idle := rep.activeRules()
	inputs := ""
	if len(rep.Traffic) > 1 {
		inputs = rep.inputs()
	}
	return htmlReport.Execute(w, struct {
		*Report
		Chart                     chart
		Active                    []RuleDiff
		Idle                      int
		Summary, Inputs           string
		RulesLegend, ValuesLegend string
		ValuesShown               string
	}{rep, newChart(rep), active, idle, rep.summary(), inputs, rulesLegend, valuesLegend, rep.valuesShown()})
}
