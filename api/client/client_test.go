package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// TestClientRefusesAnswerNotDescribingTheChange (issue 23, finding 4): a
// squatter answered POST /v1/deny with 200 and an empty body, and the CLI
// printed "added 0 new prefixes" as if the change had been made. An
// answer that does not name the list and its prefixes is an error.
func TestClientRefusesAnswerNotDescribingTheChange(t *testing.T) {
	for _, body := range []string{`{}`, `{"list":"allow","prefixes":[]}`, `{"list":"deny"}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, body)
		}))
		c := &client.Client{Base: srv.URL, Token: "t"}
		_, err := c.Add(context.Background(), lists.DenyList, []string{"198.18.0.3/32"})
		require.Error(t, err, "Add with the answer %s", body)
		_, err = c.Remove(context.Background(), lists.DenyList, []string{"198.18.0.3/32"})
		require.Error(t, err, "Remove with the answer %s", body)
		srv.Close()
	}
}
