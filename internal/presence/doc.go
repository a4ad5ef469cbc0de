// Package presence tells whether the person at the machine is using it, so
// that the turnstile can yield the GPU to them (design.md, "Presence and
// holds": the `hold_while` conditions). It never takes a hold itself.
//
// It detects four conditions, each a [Sampler]:
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
//     processes and their descendants ([EnginePIDs]), the desktop's
//     ([Desktop], unless included) and those whose name matches an except
//     glob. For a headless box: on a desktop every accelerated application
//     (a browser, a chat client) is such a process.
//   - gpu_busy ([LocateGPUBusy]): a process, with the same exceptions, whose
//     use of the GPU has been at or over a percentage in every sample for a
//     while. It tells a game from a browser. The use comes from one
//     long-lived `nvidia-smi pmon` on Linux (its sm column) and from one
//     open PDH query on Windows (the 3D engines' Utilization Percentage of
//     the GPU Engine counters, summed by process).
//   - [Steam]: Steam says a game runs (RunningAppID is not 0: registry.vdf
//     on Linux, the registry on Windows) and Steam's client runs.
//
// A [Watcher] samples one condition at an interval and turns the samples
// into engage (at once) and release (after the condition stayed clear for a
// while) calls; it runs a condition's own source (the pmon stream, the PDH
// query) for as long as it samples. A condition that cannot be judged on
// this host says why with an [*OffError], which counts as clear.
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
//     one asked about) is not a gpu_process, nor gpu_busy; use `process`
//     globs or `steam` for it.
//   - Processes in other containers or PID namespaces are not in this
//     one's process list, so `process` globs do not find them. nvidia-smi
//     lists their host PIDs, which this namespace cannot relate to
//     anything: an engine that answers at its URL while no process here
//     listens on its port, or one published by a container's port proxy
//     (docker-proxy), turns gpu_process and gpu_busy off rather than have
//     its renders taken for a person's.
//   - A listening socket of another user's process has no visible PID
//     without root (or CAP_SYS_PTRACE): gpu_process and gpu_busy are off
//     for that engine, and [EnginePIDs] reports it as an error.
//   - nvidia-smi pmon is documented for Linux, and only for some GeForce
//     cards: a card that says it is not supported, or prints its headers
//     and never a sample, turns gpu_busy off.
//   - On Windows with WDDM drivers nvidia-smi reports used_memory as
//     [N/A] (also inside some containers); memory is never used here, only
//     the PIDs and names. Graphics processes on Windows are listed as C+G.
//     gpu_busy's PDH counters cover every adapter (the GPU index is not
//     used there).
//   - Steam's RunningAppID on Linux is that of the home read: a service's
//     HOME is not the player's, so `home PATH` names it.
package presence
