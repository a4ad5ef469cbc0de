package presence

import "slices"

// Desktop names the graphics processes of common desktop sessions (the
// contract's list and a few more compositors). A display on the GPU makes
// them permanent graphics contexts, so gpu_process and gpu_busy except
// them unless told to include them (include_desktop). Browsers, chat
// clients and other accelerated applications are not in it: gpu_busy
// tells them from a game by how much of the GPU they use.
var Desktop = []string{
	// X11 and Wayland servers and compositors.
	"Xorg", "Xwayland", "X",
	"gnome-shell", "mutter", "kwin_wayland", "kwin_x11", "plasmashell",
	"sway", "Hyprland", "weston", "cinnamon", "xfwm4",
	// Windows: the Desktop Window Manager, the shell and its hosts.
	"dwm.exe", "explorer.exe", "csrss.exe", "ShellExperienceHost.exe",
	"StartMenuExperienceHost.exe", "SearchHost.exe", "TextInputHost.exe",
	"msedgewebview2.exe",
}

// exceptGlobs are the globs a GPU condition excepts: except, and the
// desktop's processes unless includeDesktop.
func exceptGlobs(except []string, includeDesktop bool) []string {
	if includeDesktop {
		return slices.Clone(except)
	}
	return append(slices.Clone(Desktop), except...)
}

// conditionString names a GPU condition as the Caddyfile writes it.
func conditionString(head string, includeDesktop bool, except []string) string {
	if includeDesktop {
		head += " include_desktop"
	}
	if len(except) > 0 {
		head += " except"
		for _, e := range except {
			head += " " + e
		}
	}
	return head
}
