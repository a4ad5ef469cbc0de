package ollama

import "strings"

// NormalizeName returns a model name as Ollama lists it: a name without a
// tag gets ":latest" ("llama3.2" -> "llama3.2:latest"). A tag is the part
// after the last colon that follows the last slash, so a registry host with
// a port ("host:5000/m") is not mistaken for a tag.
func NormalizeName(name string) string {
	name = strings.TrimSpace(name)
	if name == "" {
		return ""
	}
	base := name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		base = name[i+1:]
	}
	if strings.Contains(base, ":") {
		return name
	}
	return name + ":latest"
}
