package config

import "regexp"

// nameRE is a turnstile's name: it names the turnstile's folder in Caddy's
// storage (its holds), so "." and ".." are no names.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]*$`)

// NameRule says what a valid name is, for messages. Engine names follow
// it too: they are metric labels, and a handler's engine option names
// them.
const NameRule = "want letters, digits, '_', '-' and '.' (not first)"

// ValidName reports whether name is a valid turnstile or engine name.
func ValidName(name string) bool { return nameRE.MatchString(name) }
