package main

import (
	"os"
	"testing"
)

// envAsMain makes the test binary run main() instead of the tests: the
// command under test is this very binary, started as `shieldlab storm`.
const envAsMain = "SHIELDLAB_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envAsMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
