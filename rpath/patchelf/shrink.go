package patchelf

import (
	"slices"
	"strings"
)

// dropEmptyEntries removes the empty entries of a search path, which glibc
// would take for the current directory.
func dropEmptyEntries(p string) string {
	return strings.Join(slices.DeleteFunc(strings.Split(p, ":"), func(s string) bool { return s == "" }), ":")
}
