package cli

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
)

// AddVersion gives root a --version flag that prints info and exits 0, before any hook runs: it
// reads no connection setting and opens nothing. With --format json it prints one
// <binary>.version/v1 document (docs/json.md).
func AddVersion(root *cobra.Command, info buildinfo.Info) {
	root.Version = info.Version
	// cobra renders --version through a template before the persistent hooks that check --format
	// run, so the template hands the command to versionText, which reads the flag itself.
	cobra.AddTemplateFunc("versionText", func(c *cobra.Command) (string, error) { return versionText(c, info) })
	root.SetVersionTemplate(`{{versionText .}}`)
}

func versionText(c *cobra.Command, info buildinfo.Info) (string, error) {
	if f := c.Flags().Lookup("format"); f == nil || f.Value.String() != "json" { // Format admits text or json only
		return info.String(c.Root().Name()) + "\n", nil
	}
	doc, err := json.Marshal(struct {
		Schema string `json:"schema"`
		Binary string `json:"binary"`
		buildinfo.Info
	}{Schema: c.Root().Name() + ".version/v1", Binary: c.Root().Name(), Info: info})
	return string(doc) + "\n", err
}
