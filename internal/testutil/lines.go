package testutil

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"testing"
)

// AnswerLines serves ln until the test ends: every line a client sends on
// a connection is answered with answer(c) and a newline. It closes ln and
// waits for its connections at cleanup.
func AnswerLines(t testing.TB, ln net.Listener, answer func(c net.Conn) string) {
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := fmt.Fprintf(c, "%s\n", answer(c)); err != nil {
						return
					}
				}
			}()
		}
	}()
}
