#!/usr/bin/env bash
# Checks the commits of a range against CONTRIBUTING.md's commit rules:
# a subject `area: imperative summary` of at most 72 characters, a blank
# line after it, and a body wrapped at 72 columns (lines indented by two
# spaces or more, quoted output, may run longer). Merge commits are left
# out. Usage: ci/commits.sh [RANGE] (default origin/main..HEAD, else the
# last commit).
set -euo pipefail
range="${1:-}"
if [ -z "$range" ]; then
	if git rev-parse -q --verify origin/main >/dev/null; then range=origin/main..HEAD; else range=HEAD~1..HEAD; fi
fi
fail=0
subject_re='^[a-z0-9][a-zA-Z0-9/._, -]*: [^ ]'
quoted_re='^  '
for c in $(git rev-list --no-merges "$range"); do
	subject=$(git log -1 --format=%s "$c")
	if [ "${#subject}" -gt 72 ]; then
		echo "$c: subject is ${#subject} characters (at most 72): $subject" >&2; fail=1
	fi
	if ! [[ "$subject" =~ $subject_re ]]; then
		echo "$c: subject is not 'area: imperative summary': $subject" >&2; fail=1
	fi
	second=$(git log -1 --format=%B "$c" | sed -n 2p)
	if [ -n "$second" ]; then
		echo "$c: no blank line between subject and body" >&2; fail=1
	fi
	while IFS= read -r line; do
		if [ "${#line}" -gt 72 ] && ! [[ "$line" =~ $quoted_re ]]; then
			echo "$c: body line of ${#line} characters (wrap at 72): $line" >&2; fail=1
		fi
	done < <(git log -1 --format=%b "$c")
done
exit $fail
