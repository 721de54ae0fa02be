// Package oldpins reads what earlier versions of the shield left pinned in
// a pin directory, so that Load carries it into this version's layout: a
// sources table of another layout or size (TakeSources moves it aside as
// SourcesPin, ReadSources reads its sources for shield to copy; Migration
// reports the copy), the lists' own membership tries with the journal of
// a change a crash interrupted (TakeLists reads them with that change
// rolled back; Recovery reports it), and verdict tries of a former value
// layout (DropVerdictTries unpins them), and the entries' hit counters in
// a per-CPU array (ReadRuleHits, RemoveRuleHits). Names lists every name those
// versions pinned, for pin.Detach.
//
// It must not write the program's maps (package shield puts what it reads
// in force); it opens, renames and removes only the old pins named here,
// in the directory it is given. It imports only package bpf's generated
// types and shield/lists and shield/source.
package oldpins
