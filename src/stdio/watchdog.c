/*
 * mcp-watchdog: the supervisor of one stdio server's process tree.
 *
 * Built by build.rs into a small program of its own, embedded in the
 * crate and started by the host with posix_spawn (see process.rs), so a
 * server costs the same whatever the size of its host: nothing of the
 * host's memory is copied, and no code of the host runs between fork and
 * exec.
 *
 * Usage: mcp-watchdog HOST_PID CWD PATH ARGV0 [ARG...]   (CWD "": the host's)
 *        mcp-watchdog HOST_PID                          (the launcher: below)
 *
 * Started with HOST_PID alone, it is the host's launcher (see launcher()):
 * it keeps a child forked ahead (the spare) that takes the next request on
 * its stdin and becomes that server's watchdog, doing all that follows with
 * what the request carried (launched()). Started with a server to run, it
 * is that server's watchdog itself, as described here.
 *
 * Descriptors on entry:
 *   0  the control socket (AF_UNIX stream): the host's other end is the
 *      lifeline; the server's stdin arrives on it as SCM_RIGHTS
 *   1  the server's stdout (a pipe to the host)
 *   2  the server's stderr (a pipe to the host)
 * The environment is the server's, less the dynamic loader's variables
 * (LD_*, DYLD_*): those come on the control socket after the server's
 * stdin (a native u32 length, then NAME=VALUE strings each ending in a
 * NUL), so what is meant for the server (LD_PRELOAD, LD_LIBRARY_PATH)
 * never loads into the watchdog, and is added back for the server's exec.
 * The working directory is changed in
 * the server, so std never needs a chdir in the spawn (which would make
 * it fork the host where posix_spawn has no chdir).
 *
 * What it does:
 *   - leaves the host's session (setsid) and, on Linux, becomes a child
 *     subreaper: every orphan of the tree (a setsid child, a double-forked
 *     daemon) is reparented to it, not to init;
 *   - starts the server (on Linux a clone sharing its memory until the
 *     exec, as posix_spawn does; a fork elsewhere) into a session and
 *     group of its own (its group id is its pid), with default signal
 *     dispositions, an empty mask, SIGKILL
 *     as its parent-death signal (Linux), stdin from the host, and execs it
 *     with execve: the resolved path, no PATH search, no shell fallback for
 *     a file in no executable format;
 *   - reports to the host, 5-byte records (a tag and a native i32):
 *       'O' pid     the server was exec'd
 *       'E' errno   the exec failed (nothing ran); the watchdog then exits
 *       'D' errno   the working directory could not be entered; likewise
 *       'Z' status  the server was reaped (its raw wait status)
 *       'X' 0       the whole tree is gone; it exits now (its absence at
 *                   the end of file: it was killed from outside)
 *       'W' pid     (a launched watchdog, first) its own pid
 *   - reads from the host: 'T' (a release's SIGTERM step: SIGTERM to the
 *     server's group and to every child it has, orphans that left the
 *     group included, and to each orphan adopted after it, once, until
 *     the tree is gone or killed) and end of file (the host is gone, or
 *     let the tree go);
 *   - ends when nothing of the tree is left: by itself once every child is
 *     reaped; at once, killing the whole tree (the server's group, then
 *     every child it has until none is left) on the lifeline's end or on
 *     the host's death (a pidfd, Linux).
 *
 * A single-threaded C program with no allocation after start-up; the only
 * signal handler writes one byte to a pipe.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef __linux__
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

extern char **environ;

/* The exit codes the host reads when no record says more. */
enum {
    EXIT_DONE = 0,    /* the tree is gone */
    EXIT_USAGE = 2,   /* started wrongly: not by the host */
    EXIT_NO_EXEC = 127 /* the server could not be exec'd ('E' sent) */
};

enum { CONTROL = 0 };

/* The launcher's request: four descriptors (the control socket's end, the
 * server's stdin, stdout and stderr) and, in the same message, a native
 * u32 argc and u32 envc, then NUL-terminated strings: the working
 * directory, the path, argc arguments, envc NAME=VALUE. */
enum { REQUEST_FDS = 4, REQUEST_MAX = 64 * 1024 };

static int wake[2] = {-1, -1};
static pid_t server = -1;
static int server_reaped = 0;
/* Since 'T': the children already sent SIGTERM (each gets it once). */
static int terminating = 0;
enum { TERMINATED_KEPT = 1024 };
static pid_t terminated[TERMINATED_KEPT];
static int terminated_count = 0;
/* How long end_tree waits for children it cannot list (no /proc), in
 * 50 ms steps: 5 s. */
enum { UNLISTED_STEPS = 100 };

static void on_child(int signal) {
    int saved = errno;
    char byte = 0;
    (void)signal;
    (void)!write(wake[1], &byte, 1);
    errno = saved;
}

/* Sends a record on the control socket `fd` (with `flags`). */
static void send_record(int fd, int flags, char tag, int32_t value) {
    unsigned char record[5];
    record[0] = (unsigned char)tag;
    memcpy(record + 1, &value, sizeof value);
    /* The host may be gone (SIGPIPE is ignored): nothing to do then. */
    ssize_t sent;
    do {
        sent = send(fd, record, sizeof record, flags);
    } while (sent == -1 && errno == EINTR);
}

/* Sends a record to the host. */
static void report(char tag, int32_t value) {
    send_record(CONTROL, 0, tag, value);
}

static void cloexec(int fd) {
    int flags = fcntl(fd, F_GETFD);
    if (flags != -1) {
        fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
}

/* Closes every descriptor from `first` up: the host's descriptors opened
 * without close-on-exec reach neither this program nor the server. */
static void close_from(int first) {
#if defined(__linux__) && defined(SYS_close_range)
    if (syscall(SYS_close_range, (unsigned)first, ~0U, 0U) == 0) {
        return;
    }
#endif
    struct rlimit limit;
    long last = 65536;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
        last = limit.rlim_cur < (1 << 20) ? (long)limit.rlim_cur : (1 << 20);
    }
    for (long fd = first; fd < last; fd++) {
        close((int)fd);
    }
}

/* One recvmsg on the control socket into `buffer`, retried on EINTR: its
 * descriptors (SCM_RIGHTS, made close-on-exec) into `fds`, at most `room`
 * (more are closed), their number in `*count`; `*cut` set when the data or
 * the descriptors did not fit. The bytes received, 0 at end of file, -1
 * on an error (errno). */
static ssize_t receive_fds(void *buffer, size_t length, int flags, int *fds, int room, int *count,
                           int *cut) {
    struct iovec data = {.iov_base = buffer, .iov_len = length};
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(REQUEST_FDS * sizeof(int))];
    } control;
    struct msghdr message;
    memset(&message, 0, sizeof message);
    memset(&control, 0, sizeof control);
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
#ifdef MSG_CMSG_CLOEXEC
    flags |= MSG_CMSG_CLOEXEC;
#endif
    ssize_t got;
    do {
        got = recvmsg(CONTROL, &message, flags);
    } while (got == -1 && errno == EINTR);
    *count = 0;
    *cut = 0;
    if (got < 0) {
        return got;
    }
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL;
         header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        size_t n = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof fd);
            cloexec(fd);
            if (*count < room) {
                fds[(*count)++] = fd;
            } else {
                close(fd);
            }
        }
    }
    *cut = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    return got;
}

/* Receives the server's stdin: one byte with one descriptor. */
static int receive_stdin(void) {
    char byte;
    int fd;
    int count;
    int cut;
    ssize_t got = receive_fds(&byte, 1, 0, &fd, 1, &count, &cut);
    if (got != 1 || count != 1 || cut) {
        if (count == 1) {
            close(fd);
        }
        return -1;
    }
    return fd;
}

/* Reads exactly `length` bytes from the control socket; 0 on success. */
static int receive_exactly(void *buffer, size_t length) {
    char *at = buffer;
    while (length > 0) {
        ssize_t got = recv(CONTROL, at, length, 0);
        if (got == -1 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            return -1;
        }
        at += got;
        length -= (size_t)got;
    }
    return 0;
}

/* The server's environment: ours, then the loader's variables the host
 * kept out of it, from the control socket. NULL if they do not come. */
static char **receive_loader_env(void) {
    uint32_t length;
    if (receive_exactly(&length, sizeof length) == -1 || length > (1u << 20)) {
        return NULL;
    }
    char *block = malloc((size_t)length + 1);
    if (block == NULL || receive_exactly(block, length) == -1) {
        return NULL;
    }
    block[length] = '\0';
    size_t ours = 0;
    while (environ[ours] != NULL) {
        ours++;
    }
    size_t theirs = 0;
    for (uint32_t i = 0; i < length; i++) {
        theirs += block[i] == '\0';
    }
    char **env = calloc(ours + theirs + 1, sizeof(char *));
    if (env == NULL) {
        return NULL;
    }
    memcpy(env, environ, ours * sizeof(char *));
    size_t count = ours;
    for (uint32_t start = 0; start < length;) {
        env[count++] = block + start;
        start += (uint32_t)strlen(block + start) + 1;
    }
    return env;
}

/* In the server, before exec: nothing of the watchdog's signal set-up
 * survives, and it gets a session and group of its own. */
static void become_server(int input, int failed, pid_t watchdog, const char *cwd, char *path,
                          char **argv, char **envp) {
    sigset_t none;
    sigemptyset(&none);
    for (int signal = 1; signal < NSIG; signal++) {
        if (signal != SIGKILL && signal != SIGSTOP) {
            struct sigaction action;
            memset(&action, 0, sizeof action);
            action.sa_handler = SIG_DFL;
            if (sigaction(signal, &action, NULL) == -1) {
#ifdef __linux__
                /* glibc refuses its internal signals (32 and 33), and its
                 * posix_spawn, which started the launcher, leaves them
                 * ignored: the kernel's call resets them. All zero is
                 * SIG_DFL, no flags and an empty mask in every
                 * architecture's layout. */
                static const unsigned long zero[16];
                syscall(SYS_rt_sigaction, signal, zero, NULL, (size_t)(NSIG - 1) / 8);
#endif
            }
        }
    }
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
#ifdef __linux__
    /* The watchdog is single-threaded: its death is its thread's. */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != watchdog) {
        _exit(137);
    }
#else
    (void)watchdog;
#endif
    /* What failed: its tag, then the errno. */
    unsigned char record[1 + sizeof(int)];
    int error;
    if (cwd[0] != '\0' && chdir(cwd) == -1) {
        record[0] = 'D';
        error = errno;
    } else if (dup2(input, 0) == -1) {
        record[0] = 'E';
        error = errno;
    } else {
        execve(path, argv, envp);
        record[0] = 'E';
        error = errno;
    }
    memcpy(record + 1, &error, sizeof error);
    ssize_t written;
    do {
        written = write(failed, record, sizeof record);
    } while (written == -1 && errno == EINTR);
    _exit(EXIT_NO_EXEC);
}

#ifdef __linux__
/* The server is started the way posix_spawn starts a child: a clone that
 * shares our memory and suspends us until it execs or exits, so nothing of
 * the watchdog is copied (a fork would copy its page tables and fault its
 * pages back in, only for the exec to drop them). It runs on a stack of its
 * own; of ours it touches this argument and errno (which we read only
 * when the clone failed, so never after it ran). */
struct server_start {
    int input;
    int failed;
    pid_t watchdog;
    const char *cwd;
    char *path;
    char **argv;
    char **envp;
};

/* One server per watchdog: one stack, used only until the server's exec. */
static char server_stack[32 * 1024] __attribute__((aligned(16)));

static int start_server(void *argument) {
    const struct server_start *start = argument;
    become_server(start->input, start->failed, start->watchdog, start->cwd, start->path,
                  start->argv, start->envp);
    return 0; /* not reached: become_server execs or exits */
}
#endif

/* Reaps every ended child; reports the server's status when it is one of
 * them; exits once no child is left (the whole tree is gone). */
static void reap(void) {
    for (;;) {
        int status = 0;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            if (pid == server) {
                server_reaped = 1;
                report('Z', status);
            }
            continue;
        }
        if (pid == 0) {
            return;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == ECHILD) {
            report('X', 0);
            _exit(EXIT_DONE);
        }
        return;
    }
}

/* Lists up to `room` of our children into `pids`; returns how many, or -1
 * when they cannot be listed. */
static int children(pid_t *pids, int room) {
#ifdef __linux__
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
    FILE *file = fopen(path, "re");
    if (file != NULL) {
        int count = 0;
        long pid;
        while (count < room && fscanf(file, "%ld", &pid) == 1) {
            pids[count++] = (pid_t)pid;
        }
        fclose(file);
        return count;
    }
    /* Kernels without CONFIG_PROC_CHILDREN: every process's parent. An
     * empty /proc (unmounted, a bare chroot) lists nothing, which is not
     * "no children": without our own entry we cannot list them. */
    pid_t self = getpid();
    char own[64];
    snprintf(own, sizeof own, "/proc/%ld/stat", (long)self);
    if (access(own, F_OK) != 0) {
        return -1;
    }
    DIR *proc = opendir("/proc");
    if (proc == NULL) {
        return -1;
    }
    int count = 0;
    struct dirent *entry;
    while (count < room && (entry = readdir(proc)) != NULL) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) {
            continue;
        }
        char stat[64];
        snprintf(stat, sizeof stat, "/proc/%ld/stat", pid);
        int fd = open(stat, O_RDONLY | O_CLOEXEC);
        if (fd == -1) {
            continue;
        }
        char text[512];
        ssize_t length = read(fd, text, sizeof text - 1);
        close(fd);
        if (length <= 0) {
            continue;
        }
        text[length] = '\0';
        /* "pid (comm) state ppid ...": comm may hold anything but the
         * last ')' ends it. */
        char *after = strrchr(text, ')');
        char state;
        long parent;
        if (after != NULL && sscanf(after + 1, " %c %ld", &state, &parent) == 2 && parent == self) {
            pids[count++] = (pid_t)pid;
        }
    }
    closedir(proc);
    return count;
#else
    /* No subreaper here: the server is the one child we can have. */
    if (room > 0 && !server_reaped) {
        pids[0] = server;
        return 1;
    }
    return 0;
#endif
}

/* Whether `pid` was sent SIGTERM already; remembers it if not. */
static int already_terminated(pid_t pid) {
    for (int i = 0; i < terminated_count; i++) {
        if (terminated[i] == pid) {
            return 1;
        }
    }
    if (terminated_count < TERMINATED_KEPT) {
        terminated[terminated_count++] = pid;
    }
    return 0;
}

/* SIGTERM to the whole tree as it is now: the server's group (the first
 * time), and every child not yet sent it and the group it leads (a daemon
 * that left the group gets the release's SIGTERM too). Called again while
 * terminating, for orphans adopted since. */
static void terminate_tree(void) {
    if (!terminating && !server_reaped) {
        kill(-server, SIGTERM);
        already_terminated(server);
    }
    terminating = 1;
    pid_t pids[256];
    int count = children(pids, 256);
    for (int i = 0; i < count; i++) {
        if (already_terminated(pids[i])) {
            continue;
        }
        if (getpgid(pids[i]) == pids[i]) {
            kill(-pids[i], SIGTERM);
        }
        kill(pids[i], SIGTERM);
    }
}

/* Kills the whole tree and exits once nothing of it is left: the server's
 * group, then every child (orphans come to us as their parents die) and
 * the group each leads, until none is left. A child we have not reaped
 * keeps its pid, so each signal reaches the process meant. */
static void end_tree(void) {
    if (!server_reaped) {
        kill(-server, SIGKILL);
    }
    for (int unlisted = 0;; ) {
        reap();
        pid_t pids[256];
        int count = children(pids, 256);
        if (count < 0) {
            /* Cannot list them (no /proc): the server is killed; orphans
             * we cannot name are waited for, within a bound, then left
             * (the guide's known gaps). */
            if (!server_reaped) {
                kill(server, SIGKILL);
            } else if (++unlisted > UNLISTED_STEPS) {
                report('X', 0);
                _exit(EXIT_DONE);
            }
        }
        for (int i = 0; i < count; i++) {
            if (getpgid(pids[i]) == pids[i]) {
                kill(-pids[i], SIGKILL);
            }
            kill(pids[i], SIGKILL);
        }
        /* Until one of them ends (SIGCHLD), or 50 ms: one that arrived
         * since the list is in the next. */
        struct pollfd woken = {.fd = wake[0], .events = POLLIN};
        if (poll(&woken, 1, 50) > 0) {
            char drain[64];
            while (read(wake[0], drain, sizeof drain) > 0) {
            }
        }
    }
}

/* The signals a release or a terminal sends ignored (what the host
 * ignored stays ignored across exec: ours are set here), SIGCHLD waking
 * the loop through `wake`, nothing blocked. */
static int set_signals(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_IGN;
    int ignored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) {
        sigaction(ignored[i], &action, NULL);
    }
    if (pipe(wake) == -1) {
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        cloexec(wake[i]);
        fcntl(wake[i], F_SETFL, fcntl(wake[i], F_GETFL) | O_NONBLOCK);
    }
    memset(&action, 0, sizeof action);
    action.sa_handler = on_child;
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&action.sa_mask);
    sigaction(SIGCHLD, &action, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    return 0;
}

/* Becomes a watchdog: out of the host's session and group (a signal to
 * the host's group or a terminal's does not reach us; a host killed with
 * its group is seen by the lifeline, and its tree ended), a subreaper, the
 * signals set. */
static int become_watchdog(void) {
    setsid();
#ifdef __linux__
    prctl(PR_SET_NAME, "mcp-watchdog", 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
    return set_signals();
}

/* A pidfd of the host (Linux): its death is seen even if a fork of it
 * (without exec) holds the lifeline's other end. -1 where there is none. */
static int open_host(pid_t host) {
    int host_gone = -1;
#if defined(__linux__) && defined(SYS_pidfd_open)
    host_gone = (int)syscall(SYS_pidfd_open, host, 0);
    if (host_gone >= 0) {
        cloexec(host_gone);
    }
#else
    (void)host;
#endif
    return host_gone;
}

/* Starts the server and watches its tree until it is gone: see the top. */
static int run(int host_gone, int input, const char *cwd, char *path, char **server_argv,
               char **server_env) {
    /* The host gone, or its spawn given up, while this waited (in the
     * launcher's queue): nothing is started. */
    struct pollfd now[2] = {
        {.fd = CONTROL, .events = POLLIN},
        {.fd = host_gone, .events = POLLIN},
    };
    if (poll(now, host_gone >= 0 ? 2 : 1, 0) > 0) {
        char byte;
        if ((host_gone >= 0 && now[1].revents != 0) ||
            (now[0].revents != 0 && recv(CONTROL, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0)) {
            return EXIT_DONE;
        }
    }
    int status_pipe[2];
    if (pipe(status_pipe) == -1) {
        report('E', errno);
        return EXIT_NO_EXEC;
    }
    cloexec(status_pipe[0]);
    cloexec(status_pipe[1]);
    pid_t watchdog = getpid();
#ifdef __linux__
    /* No handler of ours may run in a child that shares our memory: all
     * signals are blocked across the clone (the child resets every
     * disposition before it unblocks them). */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    struct server_start start = {input, status_pipe[1], watchdog, cwd, path, server_argv, server_env};
    pid_t child = clone(start_server, server_stack + sizeof server_stack,
                        CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
    int clone_error = errno; /* read only if the clone failed: no child ran */
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (child == -1) {
        report('E', clone_error);
        return EXIT_NO_EXEC;
    }
#else
    pid_t child = fork();
    if (child == -1) {
        report('E', errno);
        return EXIT_NO_EXEC;
    }
    if (child == 0) {
        become_server(input, status_pipe[1], watchdog, cwd, path, server_argv, server_env);
    }
#endif
    server = child;
    close(status_pipe[1]);
    close(input);
    /* The server's stdout and stderr are its own now: the host sees them
     * end when the tree closes them, not when we do. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
        close(null);
    } else {
        close(1);
        close(2);
    }
    unsigned char failure[1 + sizeof(int)];
    ssize_t got;
    do {
        got = read(status_pipe[0], failure, sizeof failure);
    } while (got == -1 && errno == EINTR);
    close(status_pipe[0]);
    if (got == (ssize_t)sizeof failure) {
        int error;
        memcpy(&error, failure + 1, sizeof error);
        report((char)failure[0], error);
        int ignored_status;
        while (waitpid(server, &ignored_status, 0) == -1 && errno == EINTR) {
        }
        return EXIT_NO_EXEC;
    }
    report('O', (int32_t)server);

    for (;;) {
        reap();
        struct pollfd fds[3] = {
            {.fd = CONTROL, .events = POLLIN},
            {.fd = wake[0], .events = POLLIN},
            {.fd = host_gone, .events = POLLIN},
        };
        nfds_t count = host_gone >= 0 ? 3 : 2;
        /* Terminating: orphans adopted from a grandchild's death bring no
         * SIGCHLD, so the children are listed again every 100 ms. */
        if (poll(fds, count, terminating ? 100 : -1) == -1) {
            if (errno == EINTR) {
                continue;
            }
            /* Cannot watch: end the tree rather than leave it unwatched. */
            end_tree();
        }
        if (fds[0].revents != 0) {
            char commands[16];
            ssize_t read_bytes = recv(CONTROL, commands, sizeof commands, MSG_DONTWAIT);
            if (read_bytes == 0 || (read_bytes == -1 && errno != EINTR && errno != EAGAIN &&
                                    errno != EWOULDBLOCK)) {
                end_tree();
            }
            for (ssize_t i = 0; i < read_bytes; i++) {
                if (commands[i] == 'T') {
                    terminate_tree();
                }
            }
        }
        if (count == 3 && fds[2].revents != 0) {
            end_tree();
        }
        if (fds[1].revents != 0) {
            char drain[64];
            while (read(wake[0], drain, sizeof drain) > 0) {
            }
        }
        if (terminating) {
            reap();
            terminate_tree();
        }
    }
}


/* In the launcher's child: the request's descriptors put in place (0 the
 * control socket, 1 and 2 the server's stdout and stderr, 3 its stdin, 4
 * the host's pidfd), the request parsed, then a watchdog as any other.
 * Sends 'W' (its pid) first: the host is not its parent. */
static int launched(int fds[REQUEST_FDS], int host_gone, char *request, size_t length) {
    int high[REQUEST_FDS + 1];
    for (int i = 0; i < REQUEST_FDS; i++) {
        high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 16);
    }
    high[REQUEST_FDS] = host_gone >= 0 ? fcntl(host_gone, F_DUPFD_CLOEXEC, 16) : -1;
    for (int i = 0; i < REQUEST_FDS; i++) {
        if (high[i] < 0) {
            _exit(EXIT_USAGE);
        }
    }
    /* 0 control, 1 stdout, 2 stderr, 3 stdin, 4 the host's pidfd. */
    int order[REQUEST_FDS + 1] = {high[0], high[2], high[3], high[1], high[4]};
    for (int target = 0; target <= REQUEST_FDS; target++) {
        if (order[target] >= 0) {
            dup2(order[target], target);
        } else {
            close(target);
        }
    }
    close_from(5);
    cloexec(3);
    if (high[REQUEST_FDS] >= 0) {
        cloexec(4);
    }
    report('W', (int32_t)getpid());
    if (become_watchdog() == -1) {
        report('E', errno);
        _exit(EXIT_NO_EXEC);
    }
    /* A request that does not parse is the host's fault, not the
     * configuration's: EPROTO, which the host reports as retryable. */
    uint32_t counts[2];
    if (length < sizeof counts) {
        report('E', EPROTO);
        _exit(EXIT_NO_EXEC);
    }
    memcpy(counts, request, sizeof counts);
    /* Each string is at least its NUL: more than the bytes cannot be. */
    if (counts[0] > length || counts[1] > length || (size_t)counts[0] + counts[1] + 2 > length) {
        report('E', EPROTO);
        _exit(EXIT_NO_EXEC);
    }
    size_t strings = (size_t)counts[0] + counts[1] + 2;
    char **list = calloc(strings + 2, sizeof(char *));
    if (list == NULL) {
        report('E', ENOMEM);
        _exit(EXIT_NO_EXEC);
    }
    /* Every string ends inside the message, and there are as many as said. */
    size_t found = 0;
    for (size_t at = sizeof counts; at < length && found < strings;) {
        char *end = memchr(request + at, '\0', length - at);
        if (end == NULL) {
            break;
        }
        list[found++] = request + at;
        at = (size_t)(end - request) + 1;
    }
    if (found != strings || counts[0] == 0) {
        report('E', EPROTO);
        _exit(EXIT_NO_EXEC);
    }
    /* cwd, path, argv..., NULL, env..., NULL: argv's end is moved up one. */
    char **server_argv = calloc((size_t)counts[0] + 1, sizeof(char *));
    char **server_env = calloc((size_t)counts[1] + 1, sizeof(char *));
    if (server_argv == NULL || server_env == NULL) {
        report('E', ENOMEM);
        _exit(EXIT_NO_EXEC);
    }
    memcpy(server_argv, list + 2, counts[0] * sizeof(char *));
    memcpy(server_env, list + 2 + counts[0], counts[1] * sizeof(char *));
    return run(high[REQUEST_FDS] >= 0 ? 4 : -1, 3, list[0], list[1], server_argv, server_env);
}

/* Takes one request off the launcher's socket: a watchdog for it, forked
 * ahead, when `taken` >= 0 (it leaves the launcher's group at once, then
 * its pid, 4 bytes, goes to `taken`, so the launcher forks the next spare),
 * else forked now. Returns -1 when the socket is done (end of file, the
 * host gone, or broken), 0 otherwise. A request that is cut or lacks
 * descriptors is refused ('E' EPROTO where there is a control socket to
 * say it on). */
static int take_request(int host_gone, char *request, int taken) {
    int passed[REQUEST_FDS];
    int passed_count;
    int cut;
    ssize_t got =
        receive_fds(request, REQUEST_MAX, MSG_DONTWAIT, passed, REQUEST_FDS, &passed_count, &cut);
    if (got == 0) {
        return -1; /* the host let us go, or is gone */
    }
    if (got < 0) {
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
    if (passed_count == REQUEST_FDS && cut) {
        send_record(passed[0], MSG_DONTWAIT, 'E', EPROTO);
    } else if (passed_count == REQUEST_FDS && taken >= 0) {
        /* Out of the launcher's group before anyone hears of it: a signal
         * to that group (the host letting a wedged launcher go) is not
         * for a watchdog with a request. */
        setsid();
        int32_t me = (int32_t)getpid();
        (void)!write(taken, &me, sizeof me);
        close(CONTROL);
        _exit(launched(passed, host_gone, request, (size_t)got));
    } else if (passed_count == REQUEST_FDS) {
        pid_t child = fork();
        if (child == 0) {
            close(CONTROL);
            _exit(launched(passed, host_gone, request, (size_t)got));
        }
        if (child == -1) {
            send_record(passed[0], MSG_DONTWAIT, 'E', errno);
        }
    }
    for (int i = 0; i < passed_count; i++) {
        close(passed[i]);
    }
    return 0;
}

/* Forks the spare: a child of the launcher that waits on the launcher's
 * socket and becomes the watchdog of the next request itself, so that
 * request waits for no fork (and no wake-up of the launcher). It stays in
 * the launcher's group (a signal to the group reaches it) and ends with
 * the launcher until it takes a request: `alive` is a pipe whose write end
 * only the launcher holds, so its end of file says the launcher is gone
 * (a signal at its death would also reach a spare that has just taken a
 * request). Its pid, or -1. */
static pid_t fork_spare(int host_gone, char *request, int taken[2], int alive[2]) {
    pid_t child = fork();
    if (child != 0) {
        return child;
    }
    close(taken[0]);
    close(alive[1]);
    for (;;) {
        struct pollfd fds[3] = {
            {.fd = CONTROL, .events = POLLIN},
            {.fd = alive[0], .events = POLLIN},
            {.fd = host_gone, .events = POLLIN},
        };
        if (poll(fds, host_gone >= 0 ? 3 : 2, -1) == -1) {
            if (errno == EINTR) {
                continue;
            }
            _exit(EXIT_DONE);
        }
        if (fds[1].revents != 0 || (host_gone >= 0 && fds[2].revents != 0)) {
            _exit(EXIT_DONE);
        }
        if (fds[0].revents != 0 && take_request(host_gone, request, taken[1]) == -1) {
            _exit(EXIT_DONE);
        }
    }
}

/* What the launcher's socket holds, seen without taking anything. */
enum socket_state { QUEUED, EMPTY, ENDED, BROKEN };

static enum socket_state socket_state(void) {
    char byte;
    ssize_t peeked = recv(CONTROL, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (peeked > 0) {
        return QUEUED;
    }
    if (peeked == 0) {
        return ENDED;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? EMPTY : BROKEN;
}

/* The launcher: started once per host (usage: mcp-watchdog HOST_PID, its
 * stdin a SOCK_SEQPACKET socket). It keeps one spare forked (above), which
 * takes the next request off the socket and becomes its watchdog, so a
 * server costs the host one message and no fork on its path; the launcher
 * forks the next spare once told, and serves requests itself (a fork
 * each) only while it has none. Its children are reaped here; each
 * watchdog watches its own tree, with its own lifeline and the host's
 * pidfd, so it does not need the launcher once it has a request. It ends
 * with the host: its socket's end of file (once the requests sent before
 * it are taken), or the host's pidfd. */
static int launcher(pid_t host) {
    close_from(3);
    setsid();
    /* Every request names its server's directory: this one pins none. */
    (void)!chdir("/");
#ifdef __linux__
    prctl(PR_SET_NAME, "mcp-launcher", 0, 0, 0);
#endif
    if (set_signals() == -1) {
        return EXIT_USAGE;
    }
    int host_gone = open_host(host);
    if (getppid() != host) {
        return EXIT_USAGE;
    }
    char *request = malloc(REQUEST_MAX);
    int taken[2];
    int alive[2];
    if (request == NULL || pipe(taken) == -1 || pipe(alive) == -1) {
        return EXIT_USAGE;
    }
    for (int i = 0; i < 2; i++) {
        cloexec(taken[i]);
        cloexec(alive[i]);
        fcntl(taken[i], F_SETFL, fcntl(taken[i], F_GETFL) | O_NONBLOCK);
    }
    pid_t spare = -1;
    /* The host closed its end: what it sent before is still served. */
    int hung_up = 0;
    for (;;) {
        int status;
        pid_t reaped;
        int spare_ended = 0;
        while ((reaped = waitpid(-1, &status, WNOHANG)) > 0) {
            if (reaped == spare) {
                spare = -1;
                spare_ended = 1;
            }
        }
        int32_t took[16];
        ssize_t got;
        while ((got = read(taken[0], took, sizeof took)) > 0) {
            for (ssize_t i = 0; i < got / (ssize_t)sizeof took[0]; i++) {
                if (took[i] == spare) {
                    spare = -1;
                }
            }
        }
        /* A spare that ended without a request saw the socket's end (or
         * was killed): another is forked only if a request still waits or
         * the socket is open, so an end seen only there cannot make a loop
         * of forks; after the host's hang-up, only for a request. */
        if (spare_ended || hung_up) {
            enum socket_state now = socket_state();
            if (now != QUEUED && (now != EMPTY || hung_up)) {
                return EXIT_DONE;
            }
        }
        if (spare == -1) {
            spare = fork_spare(host_gone, request, taken, alive);
        }
        /* With a spare, only the socket's end is watched here (and not
         * after it: its hang-up would wake every poll); with none, the
         * requests, which are served here then, even after the hang-up. */
        struct pollfd fds[4] = {
            {.fd = hung_up && spare != -1 ? -1 : CONTROL, .events = spare == -1 ? POLLIN : POLLHUP},
            {.fd = wake[0], .events = POLLIN},
            {.fd = taken[0], .events = POLLIN},
            {.fd = host_gone, .events = POLLIN},
        };
        nfds_t count = host_gone >= 0 ? 4 : 3;
        if (poll(fds, count, -1) == -1) {
            if (errno == EINTR) {
                continue;
            }
            return EXIT_DONE;
        }
        if (count == 4 && fds[3].revents != 0) {
            return EXIT_DONE;
        }
        if (fds[1].revents != 0) {
            char drain[64];
            while (read(wake[0], drain, sizeof drain) > 0) {
            }
        }
        if (fds[0].revents == 0) {
            continue;
        }
        if (spare != -1) {
            hung_up = 1;
        } else if (take_request(host_gone, request, -1) == -1) {
            return EXIT_DONE;
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 2) {
        return launcher((pid_t)strtol(argv[1], NULL, 10));
    }
    if (argc < 5) {
        static const char usage[] =
            "mcp-watchdog is started by mcp-scoped-http, not by hand\n";
        (void)!write(2, usage, sizeof usage - 1);
        return EXIT_USAGE;
    }
    close_from(3);
    pid_t host = (pid_t)strtol(argv[1], NULL, 10);
    const char *cwd = argv[2];
    char *path = argv[3];
    char **server_argv = argv + 4;
    if (become_watchdog() == -1) {
        return EXIT_USAGE;
    }
    /* Opened before the parent is checked, so it is the host's and not a
     * reused pid's. */
    int host_gone = open_host(host);
    if (getppid() != host) {
        return EXIT_USAGE;
    }
    int input = receive_stdin();
    if (input < 0) {
        return EXIT_USAGE;
    }
    char **server_env = receive_loader_env();
    if (server_env == NULL) {
        return EXIT_USAGE;
    }
    return run(host_gone, input, cwd, path, server_argv, server_env);
}
