# ahp-terminals points ZDOTDIR here; the user's own files are still read.
__ahp_user_zdotdir=${AHP_USER_ZDOTDIR:-$HOME}
[ -f "$__ahp_user_zdotdir/.zshenv" ] && . "$__ahp_user_zdotdir/.zshenv"
