package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 140, G: 86, B: 75, A: 255},
}

// series is one line of a plot.
type series struct {
	name string
	xy   plotter.XYs
}

// plotProgress draws delivered and Synced/Healthy Applications over time for the results of one scale.
func plotProgress(results []*Result, path string) error {
	var lines []series
	for _, r := range results {
		var delivered, synced plotter.XYs
		for _, s := range r.Timeline {
			delivered = append(delivered, plotter.XY{X: s.At.Seconds(), Y: float64(s.Delivered)})
			synced = append(synced, plotter.XY{X: s.At.Seconds(), Y: float64(s.Synced)})
		}
		lines = append(lines,
			series{name: r.Scenario.Transport + ": delivered", xy: delivered},
			series{name: r.Scenario.Transport + ": Synced/Healthy on the hub", xy: synced})
	}
	title := fmt.Sprintf("%d Applications over %d clusters", results[0].Applications, results[0].Scenario.Clusters)
	return draw(title, "seconds since the first Application was created", "Applications", lines, path)
}

// plotMemory draws the resident memory of the controller, the server and the apiserver over time.
func plotMemory(results []*Result, path string) error {
	var lines []series
	for _, r := range results {
		mib := func(f func(sample) int64) plotter.XYs {
			var xy plotter.XYs
			for _, s := range r.Timeline {
				if v := f(s); v > 0 {
					xy = append(xy, plotter.XY{X: s.At.Seconds(), Y: float64(v) / (1 << 20)})
				}
			}
			return xy
		}
		t := r.Scenario.Transport
		lines = append(lines, series{name: t + ": controller", xy: mib(func(s sample) int64 { return s.ControllerRSS })})
		if t == "grpc" {
			lines = append(lines, series{name: t + ": server", xy: mib(func(s sample) int64 { return s.ServerRSS })})
		}
		lines = append(lines, series{name: t + ": kube-apiserver", xy: mib(func(s sample) int64 { return s.APIServerRSS })})
	}
	title := fmt.Sprintf("Resident memory, %d Applications", results[0].Applications)
	return draw(title, "seconds since the first Application was created", "MiB", lines, path)
}

func draw(title, xLabel, yLabel string, lines []series, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, s := range lines {
		if len(s.xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.name, err)
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("save %s: %w", filepath.Base(path), err)
	}
	return nil
}
