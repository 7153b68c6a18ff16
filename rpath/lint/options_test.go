package lint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/lint"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// TestOptionsValidate: Validate reports every bad value at once, and the
// zero Options is valid.
func TestOptionsValidate(t *testing.T) {
	require.NoError(t, (&lint.Options{}).Validate())
	err := (&lint.Options{
		Policy:        policy.Config{DriverLink: "lib", IgnoreMissing: []string{""}},
		StoreDir:      "nix/store",
		Enable:        []string{"CP999"},
		Disable:       []string{"nothing-such"},
		DriverVersion: "580",
		Jobs:          -2,
	}).Validate()
	for _, want := range []string{
		`driver link "lib" is not absolute`,
		"empty ignore-missing pattern",
		`store directory "nix/store" is not absolute`,
		`unknown rule "CP999"`,
		`unknown rule "nothing-such"`,
		`driver version "580": want an NVIDIA driver version like 580.159.04`,
		"jobs -2 < 1",
	} {
		require.ErrorContains(t, err, want)
	}
}
