# Shell integration for zsh, loaded by ahp-terminals through ZDOTDIR.
# Reports where the shell is (OSC 7), prompts and command boundaries (OSC 133)
# and the command line (OSC 633;E), after loading the user's own ~/.zshrc.
ZDOTDIR=${AHP_USER_ZDOTDIR:-$HOME}
[ -f "$ZDOTDIR/.zshrc" ] && . "$ZDOTDIR/.zshrc"

__ahp_running=0
__ahp_precmd() {
    local code=$?
    if [[ $__ahp_running == 1 ]]; then printf '\e]133;D;%s\a' "$code"; fi
    __ahp_running=0
    printf '\e]7;file://%s%s\a' "$HOST" "${PWD//\%/%25}"
    printf '\e]133;A\a'
}
__ahp_preexec() {
    __ahp_running=1
    local s=${1//\\/\\x5c}
    s=${s//;/\\x3b}
    s=${s//$'\n'/\\x0a}
    printf '\e]633;E;%s\a\e]133;C\a' "$s"
}
precmd_functions=(__ahp_precmd $precmd_functions)
preexec_functions+=(__ahp_preexec)
