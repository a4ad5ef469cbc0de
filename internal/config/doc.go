// Package config turns a turnstile's settings, as a Caddyfile or a JSON
// config gives them, into a checked config: the settings' JSON structs
// and their strict decoder, the Caddyfile's options, the validation that
// fills in the defaults and builds the engines (Validate, once per config
// load), and the registry of engine kinds (Kinds): what each kind is, how
// its adapter is built, what it can warm, which routes it owns and the
// error shape its clients parse. Errors name the option as the Caddyfile
// spells it, and the line when there is one.
package config
