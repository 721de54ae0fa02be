package results

// LiveRow is one live-path figure: a receiver on the storm link's far end
// fed by the live-frames generator at full speed from a few sources.
type LiveRow struct {
	Target      string  `json:"target"` // generator (alone), floor (XDP_DROP), shield
	Mpps        float64 `json:"mpps"`   // frames the generator sent per second
	NsFrame     float64 `json:"ns_per_frame"`
	NsOverGen   float64 `json:"ns_over_generator"` // NsFrame less the generator's own
	GeneratorMx float64 `json:"generator_x_floor,omitempty"`
}

// liveOf is the study's own drop-capacity figures from the few sources as
// LiveBench prints them, for the report's table beside the simulator's.
func liveOf(r *Results) []LiveRow {
	var rows []LiveRow
	for _, t := range []string{"generator", "floor", "shield"} {
		d := r.DropOf(t, "few")
		if d == nil || d.SentPPS.N == 0 {
			return nil
		}
		med := StatOf(func() []float64 {
			var xs []float64
			for _, s := range d.Samples {
				xs = append(xs, s.SentPPS)
			}
			return xs
		}()).Median
		row := LiveRow{Target: t, Mpps: med / 1e6}
		if med > 0 {
			row.NsFrame = 1e9 / med
		}
		if len(rows) > 0 {
			row.NsOverGen = row.NsFrame - rows[0].NsFrame
		}
		rows = append(rows, row)
	}
	if rows[1].Mpps > 0 {
		rows[0].GeneratorMx = rows[0].Mpps / rows[1].Mpps
	}
	return rows
}
