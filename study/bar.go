package study

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// bar is the progress bar: one line, redrawn in place at each step.
type bar struct {
	lines bool // not a terminal: one line per step, no redrawing
	mu    sync.Mutex
	w     io.Writer
	total int
	n     int
	start time.Time
}

func newBar(w io.Writer, lines bool, total int) *bar {
	return &bar{w: w, lines: lines, total: total, start: time.Now()}
}

// step says what is being measured now; it counts the previous step done.
func (b *bar) step(what string) {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw(what)
	b.n++
}

func (b *bar) draw(what string) {
	const width = 30
	done := min(b.n, b.total)
	fill := width * done / max(b.total, 1)
	eta := "?"
	if done > 0 {
		left := time.Duration(float64(time.Since(b.start)) / float64(done) * float64(b.total-done))
		eta = left.Round(time.Second).String()
	}
	start, end := "\r\033[K", ""
	if b.lines {
		start, end = "", "\n"
	}
	fmt.Fprintf(b.w, "%s[%s%s] %3d%% %d/%d  eta %-6s %s%s", start, strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		100*done/max(b.total, 1), done, b.total, eta, what, end)
}

func (b *bar) done() {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n = b.total
	b.draw(fmt.Sprintf("done in %s", time.Since(b.start).Round(time.Second)))
	if !b.lines {
		fmt.Fprintln(b.w)
	}
}
