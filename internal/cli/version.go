package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/buildinfo"
)

// AddVersion gives root a --version flag that prints info's line and exits 0, before any hook
// runs: it reads no connection setting and opens nothing.
func AddVersion(root *cobra.Command, info buildinfo.Info) {
	root.Version = info.Version
	// the template is a text/template: the line goes in as a quoted constant
	root.SetVersionTemplate(`{{"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(info.String(root.Name())) + `\n"}}`)
}
