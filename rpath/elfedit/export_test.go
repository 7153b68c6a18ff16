package elfedit

// ApplyPrefix runs only the first n steps of p on t, as a process killed
// after its n-th write would leave the file: nothing is rolled back and
// nothing is synced. Crash-safety tests check every prefix.
func ApplyPrefix(p *Plan, t Target, n int) error { return p.apply(t, false, n) }

// CheckResult is what EditFile checks of a planned result before writing.
func CheckResult(before, after *File, e *Edit) error { return checkResult(before, after, e) }
