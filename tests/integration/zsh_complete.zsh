# Completes one word in an interactive zsh, in a pseudo-terminal (zpty), the
# way a user's Tab does: compinit finds `_canopy` in FPATH_DIR.
# Usage: zsh -f zsh_complete.zsh FPATH_DIR BIN_DIR LINE EXPECT
# Exits 0 once the terminal shows EXPECT, 3-5 when zpty, the shell's start
# or the completion did not come through (the caller bounds the time).
zmodload zsh/zpty || exit 3
zpty -b z 'TERM=dumb zsh -f -i'
# RE''ADY: the echo of the typed line does not match; the command's output does.
zpty -w z "PS1='%% '; fpath=(${(q)1} \$fpath); path=(${(q)2} \$path); autoload -U compinit; compinit -u -D; echo RE''ADY"
zpty -r z out '*READY*' || exit 4
zpty -w -n z "$3"$'\t'
zpty -r z out "*$4*" || exit 5
print -r -- "completed: $4"
zpty -d z
