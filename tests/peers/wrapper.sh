#!/bin/sh
# A launcher of the `npx -y PKG` / `uvx PKG` shape, for the stdio tests: the
# host starts this, this starts the real server as its child (the host's
# grandchild), and the two misbehave toward the host as those launchers do.
#
#     sh wrapper.sh [--ignore-term] [--pid-file FILE] [--] COMMAND [ARGS..]
#
# - stdin, stdout and stderr are the host's pipes, inherited by the server:
#   nothing is copied through this process, so the server's lines reach the
#   host even after this process is gone.
# - It waits for the server and exits with its status (128+N when the
#   server died of signal N, as the shell reports it).
# - It does NOT forward signals. On SIGTERM to its pid alone it dies (the
#   shell's default) and the server lives on, reparented to init or to the
#   nearest subreaper; with `--ignore-term` it stays, still waiting, and so
#   does the server. Only a signal to the whole process group (`kill --
#   -PGID`), or closing the server's stdin, reaches the server.
# - `--pid-file FILE`: writes the server's pid to FILE once it is started.
#
# It never makes a group or session of its own, so a host that starts it in
# a new group gets the server in that group too.
ignore_term=
pid_file=
while [ $# -gt 0 ]; do
    case $1 in
        --ignore-term) ignore_term=1; shift ;;
        --pid-file) pid_file=$2; shift 2 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
if [ $# -eq 0 ]; then
    echo "usage: wrapper.sh [--ignore-term] [--pid-file FILE] [--] COMMAND [ARGS..]" >&2
    exit 2
fi

# A handler that does nothing, not `trap '' TERM`: an ignored signal stays
# ignored across exec, which would make the server ignore SIGTERM too; a
# handler is reset to the default in the child.
if [ -n "$ignore_term" ]; then
    trap ':' TERM
fi

# An asynchronous command's stdin is /dev/null unless redirected, and dash
# does not count `<&0` as a redirection: the host's pipe goes through fd 3,
# which the server does not keep.
exec 3<&0
"$@" <&3 3<&- &
server=$!
exec 3<&-
if [ -n "$pid_file" ]; then
    echo "$server" >"$pid_file"
fi

# A trapped signal interrupts `wait` (status > 128) while the server still
# runs: wait again until it is gone.
while :; do
    wait "$server"
    status=$?
    if ! kill -0 "$server" 2>/dev/null; then
        exit "$status"
    fi
done
