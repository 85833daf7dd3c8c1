package chaos

import (
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }
