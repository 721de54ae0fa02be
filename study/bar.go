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
	mu    sync.Mutex
	w     io.Writer
	total int
	n     int
	start time.Time
}

func newBar(w io.Writer, total int) *bar { return &bar{w: w, total: total, start: time.Now()} }

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
	fmt.Fprintf(b.w, "\r\033[K[%s%s] %3d%% %d/%d  eta %-6s %s", strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		100*done/max(b.total, 1), done, b.total, eta, what)
}

func (b *bar) done() {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n = b.total
	b.draw(fmt.Sprintf("done in %s", time.Since(b.start).Round(time.Second)))
	fmt.Fprintln(b.w)
}
