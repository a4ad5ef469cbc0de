//go:build !windows

package presence

import "testing"

// registryVDF is laid out as Steam on Linux writes ~/.steam/registry.vdf
// (tabs, quoted keys and values, nested blocks), with RUNNING for the
// running app's id.
const registryVDF = `"Registry"
{
	"HKLM"
	{
		"Software"
		{
			"Valve"
			{
				"Steam"
				{
					"SteamPID"		"52011"
					"TempAppCmdLine"		""
				}
			}
		}
	}
	"HKCU"
	{
		"Software"
		{
			"Valve"
			{
				"Steam"
				{
					"language"		"english"
					"Apps"
					{
						"570"
						{
							"installed"		"1"
							"Running"		"RUNNING570"
							"name"		"Dota 2"
						}
					}
					"AutoLoginUser"		"player"
					"RunningAppID"		"RUNNING"
					"SourceModInstallPath"		"/home/player/.local/share/Steam/steamapps/sourcemods"
					"StartupMode"		"0"
				}
			}
		}
	}
}
`

func TestParseVDF(t *testing.T) {
	root, err := parseVDF(registryVDF)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path []string
		want string
		ok   bool
	}{
		{[]string{"Registry", "HKCU", "Software", "Valve", "Steam", "RunningAppID"}, "RUNNING", true},
		{[]string{"registry", "hkcu", "software", "valve", "steam", "runningappid"}, "RUNNING", true},
		{[]string{"Registry", "HKCU", "Software", "Valve", "Steam", "Apps", "570", "name"}, "Dota 2", true},
		{[]string{"Registry", "HKLM", "Software", "Valve", "Steam", "TempAppCmdLine"}, "", true},
		{[]string{"Registry", "HKCU", "Software", "Valve", "Steam"}, "", false}, // a block
		{[]string{"Registry", "HKCU", "Software", "Valve", "Steam", "Missing"}, "", false},
	} {
		if got, ok := root.lookup(tc.path...); got != tc.want || ok != tc.ok {
			t.Errorf("lookup(%q) = %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// Comments, bare tokens, escapes and conditionals, as other KeyValues
// files have them; broken files are errors.
func TestParseVDFSyntax(t *testing.T) {
	root, err := parseVDF("// a comment\nRoot {\n\tbare value [$LINUX]\n\t\"quoted\" \"a \\\"b\\\" \\\\ c\" // end\n\t\"empty\" {}\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := root.lookup("Root", "bare"); v != "value" {
		t.Errorf("bare = %q", v)
	}
	if v, _ := root.lookup("Root", "quoted"); v != `a "b" \ c` {
		t.Errorf("quoted = %q", v)
	}
	for _, bad := range []string{"\"a\" {", "\"a\" \"b", "\"a\"", "}", "\"a\" {\n\t\"b\" }\n}"} {
		if _, err := parseVDF(bad); err == nil {
			t.Errorf("parseVDF(%q) accepted", bad)
		}
	}
}
