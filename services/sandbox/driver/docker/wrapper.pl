# The docker driver's command wrapper: run as
# `perl -e <this> ARCH ID NONCE TIMEOUT_MS GRACE_MS COMMAND`, ARCH as `uname -m`
# says. It loads no module (POSIX alone would cost 20 ms a command).
# Docker exec can neither kill nor time out a command, so this process, the
# exec's first, runs bash -c COMMAND in a process group of its own and is a
# child subreaper: every orphaned descendant of the command, whatever group
# or session it left for, is reparented here. It records its pid in
# /tmp/.fabro-exec/ID for the driver's stop requests: TERM is forwarded to the
# command's group, USR1 kills the whole tree. It keeps the timeout itself
# (TERM at TIMEOUT_MS, the tree killed GRACE_MS later), so that a timeout
# needs no second exec, which a container at its process limit could refuse. Once bash has exited every remaining descendant is
# killed and reaped, and only then does a trailer on stderr tell the driver
# how bash ended and which cgroup limits were hit meanwhile.
# On a terminal (a process's exec with a tty; Exec never has one) the
# command's group is made the terminal's foreground group, so that it reads
# the terminal and gets its ^C and SIGWINCH, and the trailer follows the
# output on the terminal.
use strict;
my ($arch, $id, $nonce, $timeout_ms, $grace_ms, $cmd) = @ARGV;
my $WNOHANG = 1;
my %prctl = (x86_64 => 157, aarch64 => 167, ppc64le => 171, s390x => 172, riscv64 => 167);
my %clock = (x86_64 => 228, aarch64 => 113, ppc64le => 246, s390x => 260, riscv64 => 113);
my %tiocgwinsz = (x86_64 => 0x5413, aarch64 => 0x5413, ppc64le => 0x40087468, s390x => 0x5413, riscv64 => 0x5413);
my %tiocspgrp = (x86_64 => 0x5410, aarch64 => 0x5410, ppc64le => 0x80047476, s390x => 0x5410, riscv64 => 0x5410);
syscall($prctl{$arch}, 36, 1, 0, 0, 0) if defined $prctl{$arch};    # PR_SET_CHILD_SUBREAPER
# now_ms is CLOCK_MONOTONIC in milliseconds (perl-base has no Time::HiRes).
sub now_ms {
    my $ts = "\0" x 16;
    return time() * 1000 unless defined $clock{$arch} && syscall($clock{$arch}, 1, $ts) == 0;
    my ($sec, $nsec) = unpack('q2', $ts);
    return $sec * 1000 + int($nsec / 1000000);
}
my $dir = "/tmp/.fabro-exec";
mkdir $dir, 0700;
my $pidf = "$dir/$id";
if (open(my $f, '>', "$pidf.new")) { print $f "$$\n"; close $f; rename "$pidf.new", $pidf; }

sub counter {
    my ($file, $key) = @_;
    open(my $f, '<', $file) or return 0;
    while (<$f>) { return $1 if /^\Q$key\E (\d+)/ }
    return 0;
}
sub counters {
    return (counter('/sys/fs/cgroup/memory/memory.oom_control', 'oom_kill') + counter('/sys/fs/cgroup/memory.events', 'oom_kill'),
            counter('/sys/fs/cgroup/pids/pids.events', 'max') + counter('/sys/fs/cgroup/pids.events', 'max'));
}
# tree lists every descendant of this process, from /proc.
sub tree {
    my %kids;
    opendir(my $d, '/proc') or return ();
    for my $p (grep { /^\d+$/ } readdir $d) {
        open(my $s, '<', "/proc/$p/stat") or next;
        my $l = <$s>;
        push @{ $kids{$1} }, $p if defined $l && $l =~ /\)\s+\S+\s+(\d+)/;
    }
    my @out;
    my @q = ($$);
    while (@q) {
        my $x = shift @q;
        for my $c (@{ $kids{$x} || [] }) { push @out, $c; push @q, $c }
    }
    return @out;
}
my ($oom0, $pids0) = counters();
my ($pgid, $pending) = (0, '');
sub killall { $pending = 'KILL'; kill('KILL', -$pgid) if $pgid; my @t = tree(); kill('KILL', @t) if @t; }
$SIG{TERM} = sub { if ($pgid) { kill('TERM', -$pgid) } else { $pending ||= 'TERM' } };
$SIG{USR1} = \&killall;
$SIG{PIPE} = 'IGNORE';
# SIGCHLD wakes the wait below through a pipe (no race with its timer).
pipe(my $wake_r, my $wake_w) or die "fabro: pipe: $!";
fcntl($wake_w, 4, 2048);    # F_SETFL, O_NONBLOCK
$SIG{CHLD} = sub { syswrite($wake_w, "x") };
my $tty = -t STDIN;
if ($tty) {
    # Writing to the terminal from outside its foreground group (the
    # trailer, with `stty tostop`) must not stop this process.
    $SIG{TTOU} = 'IGNORE';
    # The engine (API 1.41) makes the terminal 0x0 and the driver sizes it
    # just after the start: wait for that, so the command sees its size.
    my $until = now_ms() + 2000;
    while (defined $tiocgwinsz{$arch} && now_ms() < $until) {
        my $ws = "\0" x 8;
        last if ioctl(STDIN, $tiocgwinsz{$arch}, $ws) && unpack('S', $ws) > 0;
        select(undef, undef, undef, 0.005);
    }
}
my $deadline = now_ms() + $timeout_ms;
my $child = fork();
if (!defined $child) { print STDERR "fabro: fork: $!\n"; exit 126; }
if ($child == 0) {
    setpgrp(0, 0);
    ioctl(STDIN, $tiocspgrp{$arch}, pack('i', $$)) if $tty && defined $tiocspgrp{$arch};    # tcsetpgrp
    $SIG{TTOU} = 'DEFAULT';
    # The command, not the container's init or this wrapper, is what the
    # OOM killer should choose at the memory limit.
    if (open(my $adj, '>', '/proc/self/oom_score_adj')) { print $adj "1000\n"; close $adj }
    close($wake_r);
    close($wake_w);
    $SIG{PIPE} = 'DEFAULT';
    exec { 'bash' } 'bash', '-c', $cmd;
    print STDERR "fabro: bash: $!\n";
    exit 127;
}
setpgrp($child, $child);
$pgid = $child;
if ($pending eq 'TERM') { kill('TERM', -$pgid) } elsif ($pending eq 'KILL') { killall() }
my ($st, $termed) = (undef, 0);
while (1) {
    my $r = waitpid($child, $WNOHANG);
    if ($r == $child) { $st = $?; last }
    if ($r == -1) { $st = 255 << 8; last }
    my $left = $deadline - now_ms();
    if ($left <= 0) {
        if (!$termed) { kill('TERM', -$pgid); $termed = 1; $deadline += $grace_ms; next }
        killall();
        $left = 20;
    }
    my $rin = '';
    vec($rin, fileno($wake_r), 1) = 1;
    if (select(my $rout = $rin, undef, undef, ($left < 1000 ? $left : 1000) / 1000) > 0) { sysread($wake_r, my $buf, 512) }
}
# What bash left behind dies now; looping until no child is left catches
# the processes reparented here while the previous ones were dying.
while (1) {
    my @t = tree();
    kill('KILL', @t) if @t;
    my $r;
    do { $r = waitpid(-1, $WNOHANG) } while ($r > 0);
    last if $r == -1;
    select(undef, undef, undef, 0.002);
}
my ($oom1, $pids1) = counters();
unlink $pidf;
my $how = ($st & 127) ? 'signal=' . ($st & 127) : 'exit=' . ($st >> 8);
syswrite(STDERR, "\0fabro-$nonce:$how:oom=" . ($oom1 - $oom0) . ":pids=" . ($pids1 - $pids0) . "\n");
exit 0;
