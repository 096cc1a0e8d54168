// Command dashstrict decodes Grafana dashboards strictly with grafana-foundation-sdk's Go types
// (the types Grafana's own schemas generate): the dashboard, every panel (rows' panels too), each
// panel's options and fieldConfig (defaults, overrides and the panel plugin's `custom` part) and
// its Prometheus targets. An unknown or mistyped key anywhere fails, naming its path.
//
// Grafana itself cannot run in this project's tests (its Go module is not served), so this is
// the strictest decoder of the shipped dashboards available (docs/decisions/dashboards.md).
//
// usage: dashstrict FILE...   exit 1 when any file fails; one line per file.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// failure turns the SDK's typed-nil cog.BuildErrors (an empty list in a non-nil error) into nil.
func failure(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

type rawPanel struct {
	Type        string            `json:"type"`
	Title       string            `json:"title"`
	Options     json.RawMessage   `json:"options"`
	FieldConfig json.RawMessage   `json:"fieldConfig"`
	Panels      []json.RawMessage `json:"panels"`
}

// checkPanel decodes one panel's options and fieldConfig strictly again, on its own, so an error
// names the panel; a panel type the SDK has no types for cannot be checked and fails.
func checkPanel(raw json.RawMessage, where string, types map[string]int) []error {
	var p rawPanel
	if err := json.Unmarshal(raw, &p); err != nil {
		return []error{fmt.Errorf("%s: %w", where, err)}
	}
	where = fmt.Sprintf("%s (%s %q)", where, p.Type, p.Title)
	types[p.Type]++
	var errs []error
	if p.Type == "row" {
		for i, child := range p.Panels {
			errs = append(errs, checkPanel(child, fmt.Sprintf("%s.panels[%d]", where, i), types)...)
		}
		return errs
	}
	variant, ok := cog.ConfigForPanelcfgVariant(p.Type)
	if !ok || variant.StrictOptionsUnmarshaler == nil {
		return []error{fmt.Errorf("%s: grafana-foundation-sdk has no types for panel type %q", where, p.Type)}
	}
	if len(p.Options) > 0 {
		if _, err := variant.StrictOptionsUnmarshaler(p.Options); failure(err) != nil {
			errs = append(errs, fmt.Errorf("%s.options: %w", where, err))
		}
	}
	if len(p.FieldConfig) > 0 {
		// The SDK's Panel decoder reads fieldConfig outside `custom` leniently: decode the
		// FieldConfigSource strictly here, then `custom` with the plugin's own type.
		var fc dashboard.FieldConfigSource
		if err := fc.UnmarshalJSONStrict(p.FieldConfig); failure(err) != nil {
			errs = append(errs, fmt.Errorf("%s.fieldConfig: %w", where, err))
		}
		var custom struct {
			Defaults struct {
				Custom json.RawMessage `json:"custom"`
			} `json:"defaults"`
		}
		if err := json.Unmarshal(p.FieldConfig, &custom); err != nil {
			errs = append(errs, fmt.Errorf("%s.fieldConfig: %w", where, err))
		} else if len(custom.Defaults.Custom) > 0 {
			if variant.StrictFieldConfigUnmarshaler == nil {
				errs = append(errs, fmt.Errorf("%s.fieldConfig.defaults.custom: panel type %q has no custom field config", where, p.Type))
			} else if _, err := variant.StrictFieldConfigUnmarshaler(custom.Defaults.Custom); failure(err) != nil {
				errs = append(errs, fmt.Errorf("%s.fieldConfig.defaults.custom: %w", where, err))
			}
		}
	}
	return errs
}

func checkFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var errs []error
	var d dashboard.Dashboard
	if err := d.UnmarshalJSONStrict(raw); failure(err) != nil {
		errs = append(errs, fmt.Errorf("dashboard: %w", err))
	}
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(raw, &outer); err != nil {
		errs = append(errs, err)
	}
	var top struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		errs = append(errs, err)
	}
	types := map[string]int{}
	for i, p := range top.Panels {
		errs = append(errs, checkPanel(p, fmt.Sprintf("panels[%d]", i), types)...)
	}
	if len(top.Panels) == 0 {
		errs = append(errs, errors.New("no panels"))
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	names := make([]string, 0, len(types))
	for t, n := range types {
		names = append(names, fmt.Sprintf("%s %d", t, n))
	}
	sort.Strings(names)
	return fmt.Sprintf("%d top-level keys, panels: %s", len(outer), strings.Join(names, ", ")), nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashstrict FILE...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	failed := 0
	for _, path := range os.Args[1:] {
		note, err := checkFile(path)
		if err != nil {
			failed++
			fmt.Printf("FAIL %s:\n  %s\n", path, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			continue
		}
		fmt.Printf("ok   %s: %s\n", path, note)
	}
	if failed > 0 {
		os.Exit(1)
	}
}
