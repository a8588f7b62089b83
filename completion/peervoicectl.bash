# bash completion for peervoicectl                                   -*- shell-script -*-
# Installed as $(PREFIX)/share/bash-completion/completions/peervoicectl; to try it without
# installing: source completion/peervoicectl.bash
#
# Self-contained (does not need the bash-completion package's helpers). Peer ids come from the
# running service through `peervoicectl peers --ids`. Ids contain ':', which bash treats as a word
# break, so the line is split on blanks here and the part before the last ':' is trimmed from the
# candidates, as bash-completion's __ltrim_colon_completions does.

_peervoicectl_peer_ids() {
    peervoicectl peers --ids 2>/dev/null
}

_peervoicectl() {
    local line=${COMP_LINE:0:COMP_POINT}
    local -a words=()
    read -r -a words <<<"$line"
    if [[ ${#words[@]} -eq 0 || $line == *[[:blank:]] ]]; then
        words+=("")
    fi
    local cur=${words[${#words[@]}-1]}
    local commands="status peers peer discover connect disconnect send history remove mute name visible confirm voice volume mute-peer monitor open listen join rooms room-send room-register leave send-file transfers transfer shortcut help"

    # The command: the first word after the program that is not an option.
    local command= i word
    local -a positionals=()
    local prev=${words[${#words[@]}-2]:-}
    local options_ended=
    for ((i = 1; i < ${#words[@]} - 1; i++)); do
        word=${words[i]}
        if [[ -z $command ]]; then
            [[ $word == -* ]] || command=$word
            continue
        fi
        if [[ -z $options_ended && $word == -- ]]; then
            options_ended=1
        elif [[ -z $options_ended && ($word == --max || $word == --timeout || $word == --mode) ]]; then
            ((i++))    # the option's value
        elif [[ -n $options_ended || $word != -* || $word == - ]]; then
            positionals+=("$word")
        fi
    done

    local candidates= options="--help"
    if [[ -z $command ]]; then
        candidates="$commands --help --version"
    else
        case $command in
            peers) options="--ids --help" ;;
            discover) options="--timeout --help" ;;
            history) options="--max --help" ;;
            monitor) options="--json --levels --help" ;;
            open) options="--mode --help" ;;
            listen) options="--once --help" ;;
            send-file) options="--no-wait --help" ;;
        esac
        if [[ $prev == --mode ]]; then
            COMPREPLY=($(compgen -W "stream messages" -- "$cur"))
            return 0
        fi
        if [[ $prev == --max || $prev == --timeout ]]; then
            COMPREPLY=()    # a number
            return 0
        fi
        if [[ $cur == -* && -z $options_ended ]]; then
            candidates=$options
        elif [[ $command == send-file && ${#positionals[@]} -gt 0 ]]; then
            # Files and folders to send.
            compopt -o filenames 2>/dev/null
            local candidate
            COMPREPLY=()
            while IFS= read -r candidate; do
                COMPREPLY+=("$candidate")
            done < <(compgen -f -- "$cur")
            return 0
        else
            case $command:${#positionals[@]} in
                peer:0 | connect:0 | disconnect:0 | remove:0 | send:0 | history:0 | confirm:0 | volume:0 | mute-peer:0 | open:0 | send-file:0)
                    candidates=$(_peervoicectl_peer_ids) ;;
                confirm:1) candidates="yes no" ;;
                mute:0) candidates="on off toggle" ;;
                voice:0) candidates="start stop" ;;
                visible:0) candidates="bluetooth lan" ;;
                visible:1) candidates="on off" ;;
                voice:1) candidates=$(_peervoicectl_peer_ids) ;;
                volume:1) candidates="0.0 0.5 1.0 1.5 2.0" ;;
                mute-peer:1) candidates="on off" ;;
                shortcut:0) candidates="install remove" ;;
                transfer:0) candidates="accept decline cancel" ;;
                help:0) candidates=$commands ;;
            esac
        fi
    fi

    COMPREPLY=()
    local candidate
    while IFS= read -r candidate; do
        [[ -n $candidate ]] && COMPREPLY+=("$candidate")
    done < <(compgen -W "$candidates" -- "$cur")

    # bash completes only the part of the word after the last ':' (a COMP_WORDBREAKS character).
    if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
        local prefix=${cur%"${cur##*:}"}
        for i in "${!COMPREPLY[@]}"; do
            COMPREPLY[i]=${COMPREPLY[i]#"$prefix"}
        done
    fi
    return 0
}

complete -F _peervoicectl peervoicectl
