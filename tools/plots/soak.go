package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// soakPlot draws soak-rss.png from soak-faults.csv (`make soak`, faults.TestSoak): the RSS of
// every process of the deployment over the run, one line per process (a restarted process
// goes on under the same name), and a dashed vertical line at each fault.
func soakPlot() error {
	f, err := os.Open(filepath.Join(*dir, "soak-faults.csv"))
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Println("skip soak plot: no soak-faults.csv")
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	series := map[string]plotter.XYs{}
	type fault struct {
		at   float64
		name string
	}
	var faults []fault
	maxY := 0.0
	for i, r := range rows {
		if i == 0 || len(r) < 4 {
			continue // the header
		}
		at, err := strconv.ParseFloat(r[0], 64)
		if err != nil {
			return fmt.Errorf("soak-faults.csv row %d: %v", i+1, err)
		}
		if name, ok := strings.CutPrefix(r[1], "fault: "); ok {
			faults = append(faults, fault{at / 60, name})
			continue
		}
		if r[1] == "broker" {
			continue // the JVM grows to its heap size: another scale, and not ours
		}
		rss, err := strconv.ParseFloat(r[3], 64)
		if err != nil {
			return fmt.Errorf("soak-faults.csv row %d: %v", i+1, err)
		}
		series[r[1]] = append(series[r[1]], plotter.XY{X: at / 60, Y: rss})
		maxY = max(maxY, rss)
	}
	if len(series) == 0 {
		fmt.Println("skip soak plot: no samples in soak-faults.csv")
		return nil
	}
	p := newPlot("Soak: RSS of each process, faults dashed", "minutes", "RSS (MiB)")
	p.Legend.Top = false
	p.Y.Min = 0
	p.Y.Max = maxY * 1.15
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		l, err := plotter.NewLine(series[n])
		if err != nil {
			return err
		}
		styled(i, l, nil)
		p.Add(l)
		p.Legend.Add(n, l)
	}
	for _, ft := range faults {
		l, err := plotter.NewLine(plotter.XYs{{X: ft.at, Y: 0}, {X: ft.at, Y: maxY * 1.1}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 100}
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: ft.at, Y: maxY * 1.1}}, Labels: []string{ft.name}})
		if err != nil {
			return err
		}
		p.Add(labels)
	}
	return save(p, "soak-rss.png")
}
