// Package presence tells whether the person at the machine is using it, so
// that the turnstile can yield the GPU to them (design.md, "Presence and
// holds": `hold_while process NAME...` and `hold_while gpu_process
// [except NAME...]`).
//
// It detects two conditions, each a [Sampler]:
//
//   - [Processes]: a running process whose name matches a glob, e.g. a game
//     launcher (`steam`) or a game. The name is looked for in three places:
//     the executable's base name, the process name (on Linux that is
//     /proc/PID/status's Name, which the kernel cuts to 15 bytes; gopsutil
//     extends it from the command line when it can), and the base name of
//     the command line's first argument (which is where Proton/Wine games
//     show their `Game.exe`).
//   - [GPUProcesses]: any process nvidia-smi lists on the GPU, compute
//     (CUDA) or graphics (games, compositors), except the engines' own
//     processes and their descendants ([EnginePIDs]) and those whose name
//     matches an except glob.
//
// A [Watcher] samples one condition at an interval and turns the samples
// into engage (at once) and release (after the condition stayed clear for a
// while) calls; it does not take holds itself.
//
// Matching is case-insensitive on every platform: a glob is compared with
// the names people see in a task manager, and "mygame*" is meant to find
// MyGame.x86_64 on Linux as well as MyGame.exe on Windows. Each name is
// also tried without a trailing ".exe", so that "witcher3" finds
// witcher3.exe. Globs use path.Match syntax and match base names, never
// paths: a glob containing "/" is refused.
//
// What it cannot see:
//
//   - A game that never touches the GPU (or an NVIDIA GPU other than the
//     one asked about) is not a gpu_process; use `process` globs for it.
//   - Processes in other containers or PID namespaces are not in this
//     one's process list, so `process` globs do not find them. nvidia-smi
//     lists their host PIDs, which this namespace cannot relate to
//     anything: an engine run in a container (its port published by
//     docker-proxy) is not a descendant of the listening process, so its
//     GPU process counts as foreign unless an except glob names it.
//   - A listening socket of another user's process has no visible PID
//     without root (or CAP_SYS_PTRACE); [EnginePIDs] reports that as an
//     error rather than counting the engine's GPU process as a person's.
//   - On Windows with WDDM drivers nvidia-smi reports used_memory as
//     [N/A] (also inside some containers); memory is never used here, only
//     the PIDs and names. Graphics processes on Windows are listed as C+G.
//   - A desktop session itself is a graphics context (Xorg, gnome-shell,
//     kwin, dwm.exe): on a machine with a display on the same GPU,
//     gpu_process needs those in its except list, see [Desktop].
package presence
