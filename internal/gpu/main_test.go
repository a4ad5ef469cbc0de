package gpu

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its GPU, and Close waits for every goroutine the GPU
// started: none may be left when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
