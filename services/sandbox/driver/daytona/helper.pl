# The Daytona driver's helper, uploaded into each sandbox and run through
# the toolbox's executeCommand as `perl HELPER REQUEST`, REQUEST being
# base64 of a JSON object (the toolbox splits the command on spaces and
# knows no escapes, so nothing else may carry arguments), or @FILE naming
# an uploaded request file. It answers one JSON object on stdout.
#
# Daytona's file API follows symbolic links wherever they lead, so every
# path is confined here: made absolute below the root, cleaned, and each
# link on the way resolved by hand, its target held to the root too.
# Commands run under a supervisor: bash -c in a process group of its own,
# this process a child subreaper, stdin, stdout and stderr in files, a
# timeout that sends TERM, then KILL after the grace, and every descendant
# killed and reaped before the answer is written.
use strict;
use warnings;
use POSIX ();
use JSON::PP ();
use MIME::Base64 ();
use Errno ();
use Fcntl ':mode';

my $json = JSON::PP->new->utf8->canonical;

# The toolbox merges stderr into the answer: keep it clean.
open(STDERR, '>', '/dev/null');

sub reply { print $json->encode($_[0]); exit 0 }
sub fail { my ($kind, $msg) = @_; reply({ err => $kind, msg => $msg }) }

my $arg = shift @ARGV // fail('invalid', 'no request');
my $raw;
if ($arg =~ /^@(.+)$/) {
    open(my $f, '<', $1) or fail('invalid', "request file: $!");
    local $/;
    $raw = <$f>;
    close $f;
    unlink $1;
} else {
    $raw = MIME::Base64::decode_base64($arg);
}
my $req = eval { $json->decode($raw) } or fail('invalid', 'bad request');
my $op = $req->{op} // '';
my $root = $req->{root} // '/';

# errno_kind names an errno the way the driver's errors do.
sub errno_kind {
    my $e = $!{ENOENT} ? 'not_found' : $!{ENOTDIR} ? 'not_dir' : $!{EISDIR} ? 'is_dir'
        : ($!{ENOTEMPTY} || $!{EEXIST}) ? 'not_empty' : $!{ELOOP} ? 'escapes' : $!{EACCES} ? 'denied' : 'io';
    return $e;
}
sub fail_errno { my ($what) = @_; my $m = "$what: $!"; fail(errno_kind(), $m) }

sub parts { grep { $_ ne '' && $_ ne '.' } split m{/+}, $_[0] }

# clean makes an absolute path without . or ..; undef if it climbs above /.
sub clean {
    my @out;
    for my $c (parts($_[0])) {
        if ($c eq '..') { return undef unless @out; pop @out } else { push @out, $c }
    }
    return '/' . join('/', @out);
}
sub inside { my ($p) = @_; return $p eq $root || index($p, $root eq '/' ? '/' : "$root/") == 0 }
sub below { my ($p) = @_; return () if $p eq $root; return parts(substr($p, length($root))) }

# resolve confines path p to the root, following links on the way (and the
# last one too when follow is set); it returns the real path.
sub resolve {
    my ($p, $follow) = @_;
    fail('invalid', 'path contains NUL') if $p =~ /\0/;
    $p = '.' if $p eq '';
    my $abs = clean($p =~ m{^/} ? $p : "$root/$p");
    fail('escapes', $p) unless defined $abs && inside($abs);
    my @rest = below($abs);
    my $cur = $root;
    my $hops = 0;
    while (@rest) {
        my $c = shift @rest;
        my $next = $cur eq '/' ? "/$c" : "$cur/$c";
        if ((@rest || $follow) && -l $next) {
            fail('escapes', "$p (too many symbolic links)") if ++$hops > 40;
            my $t = readlink($next);
            fail_errno($p) unless defined $t;
            my $ta = clean($t =~ m{^/} ? $t : "$cur/$t");
            fail('escapes', $p) unless defined $ta && inside($ta);
            unshift @rest, below($ta);
            $cur = $root;
            next;
        }
        $cur = $next;
    }
    return $cur;
}

sub ftype {
    my ($mode) = @_;
    return S_ISREG($mode) ? 'file' : S_ISDIR($mode) ? 'dir' : S_ISLNK($mode) ? 'link' : 'other';
}
sub info {
    my ($name, @st) = @_;
    my $t = ftype($st[2]);
    return { path => $name, type => $t, size => ($t eq 'dir' ? 0 : $st[7]) + 0, mode => ($st[2] & 07777) + 0, mtime => $st[9] + 0 };
}
sub mkdir_p {
    my ($d) = @_;
    return 1 if -d $d;
    my $parent = $d =~ s{/[^/]+$}{}r;
    $parent = '/' if $parent eq '';
    mkdir_p($parent) or return 0;
    return mkdir($d, 0755) || -d $d;
}
sub rm_rf {
    my ($p) = @_;
    if (-d $p && !-l $p) {
        opendir(my $d, $p) or return 0;
        my @e = grep { $_ ne '.' && $_ ne '..' } readdir $d;
        closedir $d;
        rm_rf("$p/$_") or return 0 for @e;
        return rmdir $p;
    }
    return unlink $p;
}

# walk calls fn(relative path, lstat) for every entry below dir, depth
# first, sorted, down to maxdepth (0: none), pruning directories named in
# exclude; links are not followed.
sub walk {
    my ($dir, $rel, $depth, $max, $exclude, $fn) = @_;
    opendir(my $d, $dir) or return;
    my @e = sort grep { $_ ne '.' && $_ ne '..' } readdir $d;
    closedir $d;
    for my $n (@e) {
        my $r = $rel eq '' ? $n : "$rel/$n";
        my @st = lstat("$dir/$n") or next;
        my $isdir = S_ISDIR($st[2]);
        next if $isdir && $exclude->{$n};
        $fn->($r, @st);
        walk("$dir/$n", $r, $depth + 1, $max, $exclude, $fn) if $isdir && ($max == 0 || $depth + 1 < $max);
    }
}

if ($op eq 'init') {
    my $dir = $req->{dir};
    mkdir_p($dir) or fail_errno($dir);
    require Cwd;
    my $real = Cwd::abs_path($dir) // fail_errno($dir);
    my $os = 'unknown';
    if (open(my $f, '<', '/etc/os-release')) {
        while (<$f>) { if (/^PRETTY_NAME="?([^"\n]*)"?/) { $os = $1; last } }
    }
    reply({ dir => $real, platform => lc((POSIX::uname())[0]), os => $os,
            rg => (grep { -x "$_/rg" } split /:/, $ENV{PATH} // '/usr/bin:/bin') ? 1 : 0 });
}
if ($op eq 'stat') {
    my $p = resolve($req->{path}, 1);
    my @st = stat($p);
    unless (@st) { fail('not_found', $req->{path}) if $!{ENOTDIR}; fail_errno($req->{path}) }
    reply(info($req->{path}, @st));
}
if ($op eq 'open') {
    my $p = resolve($req->{path}, 1);
    my @st = stat($p) or fail_errno($req->{path});
    fail('is_dir', $req->{path}) if S_ISDIR($st[2]);
    fail('invalid', "$req->{path} is not a regular file") unless S_ISREG($st[2]);
    open(my $f, '<', $p) or fail_errno($req->{path});
    close $f;
    reply({ real => $p, size => $st[7] + 0 });
}
if ($op eq 'write') {
    my $p = resolve($req->{path}, 1);
    my $src = $req->{src};
    my $fail = sub { unlink $src; fail(@_) };
    $fail->('is_dir', $req->{path}) if $p eq $root;
    my ($mode, $created) = (0644, 1);
    if (my @st = stat($p)) {
        $fail->('is_dir', $req->{path}) if S_ISDIR($st[2]);
        ($mode, $created) = ($st[2] & 07777, 0);
    } elsif (!$!{ENOENT}) {
        my $k = errno_kind();
        $fail->($k, "$req->{path}: $!");
    }
    my $dir = $p =~ s{/[^/]+$}{}r;
    $dir = '/' if $dir eq '';
    unless (mkdir_p($dir)) { my $k = errno_kind(); $fail->($k, "$req->{path}: $!") }
    # The upload landed elsewhere; copy it beside the target, then rename
    # over it, so no reader sees a partial file.
    my $tmp = "$dir/." . ($p =~ s{.*/}{}r) . ".tmp-$$";
    open(my $in, '<', $src) or $fail->('io', "upload: $!");
    binmode $in;
    unless (open(my $out, '>', $tmp)) { my $k = errno_kind(); $fail->($k, "$req->{path}: $!") }
    else {
        binmode $out;
        my $buf;
        while (read($in, $buf, 1 << 16)) { print $out $buf }
        close $out;
        close $in;
        chmod $mode, $tmp;
        unless (rename $tmp, $p) { my $k = errno_kind(); unlink $tmp; $fail->($k, "$req->{path}: $!") }
    }
    unlink $src;
    reply({ created => $created ? JSON::PP::true : JSON::PP::false });
}
if ($op eq 'remove') {
    my $p = resolve($req->{path}, 0);
    fail('escapes', "$req->{path} is the root itself") if $p eq $root;
    my @st = lstat($p) or fail_errno($req->{path});
    if (S_ISDIR($st[2])) {
        if ($req->{recursive}) { rm_rf($p) or fail_errno($req->{path}) }
        else { rmdir $p or fail_errno($req->{path}) }
    } else {
        unlink $p or fail_errno($req->{path});
    }
    reply({});
}
if ($op eq 'rename') {
    my $f = resolve($req->{from}, 0);
    my $t = resolve($req->{to}, 0);
    fail('escapes', 'cannot move the root') if $f eq $root || $t eq $root;
    lstat($f) or fail_errno($req->{from});
    fail('not_empty', "cannot move $req->{from} into itself") if $t ne $f && index("$t/", "$f/") == 0;
    if (my @st = lstat($t)) { fail('is_dir', "$req->{to} is an existing directory") if S_ISDIR($st[2]) && $t ne $f }
    my $dir = $t =~ s{/[^/]+$}{}r;
    mkdir_p($dir eq '' ? '/' : $dir) or fail_errno($req->{to});
    rename $f, $t or fail_errno($req->{to});
    reply({});
}
if ($op eq 'mkdir') {
    my $p = resolve($req->{path}, 1);
    if (my @st = stat($p)) {
        reply({ created => JSON::PP::false }) if S_ISDIR($st[2]);
        fail('exists', "$req->{path} (or one of its parents)");
    }
    fail('exists', "$req->{path} (or one of its parents)") if $!{ENOTDIR};
    fail_errno($req->{path}) unless $!{ENOENT};
    unless (mkdir_p($p)) { fail('exists', "$req->{path} (or one of its parents)") if $!{ENOTDIR} || $!{EEXIST}; fail_errno($req->{path}) }
    reply({ created => JSON::PP::true });
}
if ($op eq 'list') {
    my $p = resolve($req->{path}, 1);
    my @st = stat($p) or fail_errno($req->{path});
    fail('not_dir', $req->{path}) unless S_ISDIR($st[2]);
    my @out;
    walk($p, '', 0, $req->{depth} // 1, {}, sub { push @out, info(@_) });
    reply({ entries => \@out });
}
if ($op eq 'walk') {
    my $p = resolve($req->{path}, 0);
    my @st = lstat($p);
    reply({ files => [] }) if !@st && $!{ENOENT};
    fail_errno($req->{path}) unless @st;
    fail('not_dir', "$req->{path} (a symbolic link is not walked)") unless S_ISDIR($st[2]);
    my %ex = map { $_ => 1 } @{ $req->{exclude} // [] };
    my @out;
    walk($p, '', 0, $req->{maxdepth} // 0, \%ex, sub { my ($r, @s) = @_; push @out, { path => $r, size => $s[7] + 0 } if S_ISREG($s[2]) });
    reply({ files => \@out });
}

# The rest runs a program: exec (bash -c, supervised) and grep.
my %prctl = (x86_64 => 157, aarch64 => 167, ppc64le => 171, s390x => 172, riscv64 => 167);
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
sub reap_all {
    while (1) {
        my @t = tree();
        kill('KILL', @t) if @t;
        my $r;
        do { $r = waitpid(-1, POSIX::WNOHANG()) } while ($r > 0);
        last if $r == -1;
        select(undef, undef, undef, 0.002);
    }
}
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

# run forks prog in a group of its own with stdin, stdout and stderr from
# and to files, in dir, under a timeout; it returns (wait status, how).
sub run {
    my ($dir, $env, $replace, $argv, $in, $out, $err, $timeout_ms, $grace_ms, $stop) = @_;
    my $nr = $prctl{(POSIX::uname())[4]};
    syscall($nr, 36, 1, 0, 0, 0) if defined $nr;    # PR_SET_CHILD_SUBREAPER
    my $child = fork();
    fail('io', "fork: $!") unless defined $child;
    if ($child == 0) {
        POSIX::setpgid(0, 0);
        open(STDIN, '<', $in // '/dev/null') or POSIX::_exit(126);
        open(STDOUT, '>', $out) or POSIX::_exit(126);
        open(STDERR, '>', $err) or POSIX::_exit(126);
        chdir $dir or POSIX::_exit(126);
        if ($replace) { %ENV = %$env } else { $ENV{$_} = $env->{$_} for keys %$env }
        { no warnings 'exec'; exec { $argv->[0] } @$argv; }
        print STDERR "fabro: $argv->[0]: $!\n";
        POSIX::_exit(127);
    }
    POSIX::setpgid($child, $child);
    my ($how, $st) = ('exited', undef);
    my $deadline = $timeout_ms / 1000;
    my $stage = 0;    # 0 running, 1 TERM sent, 2 KILL sent
    my $kill_at;      # when TERM's grace runs out
    my $t0 = Time::HiRes::time();
    my $killall = sub { kill('KILL', -$child); my @t = tree(); kill('KILL', @t) if @t; $stage = 2 };
    while (1) {
        my $r = waitpid($child, POSIX::WNOHANG());
        if ($r == $child) { $st = $?; last }
        if ($r == -1) { $st = 255 << 8; last }
        my $now = Time::HiRes::time();
        my $el = $now - $t0;
        # The driver asks for a stop by writing "term" or "kill" to the
        # stop file (a cancel, or a kill during the grace).
        if ($stop && $stage < 2 && -s $stop) {
            my $what = '';
            if (open(my $f, '<', $stop)) { $what = <$f> // ''; close $f }
            if ($what =~ /^kill/) { $killall->() }
            elsif ($what =~ /^term/ && $stage == 0) { kill('TERM', -$child); $stage = 1; $kill_at = $now + $grace_ms / 1000 }
        }
        if ($stage == 0 && $el >= $deadline) { $how = 'timedout'; kill('TERM', -$child); $stage = 1; $kill_at = $now + $grace_ms / 1000 }
        elsif ($stage == 1 && $now >= $kill_at) { $killall->() }
        Time::HiRes::sleep(0.002);
    }
    reap_all();
    return ($st, $how);
}
require Time::HiRes;

if ($op eq 'exec') {
    my $dir = resolve($req->{dir}, 1);
    my @st = stat($dir);
    unless (@st) { fail('not_found', "working_dir $req->{dir}") if $!{ENOTDIR}; fail_errno("working_dir $req->{dir}") }
    fail('not_dir', "working_dir $req->{dir}") unless S_ISDIR($st[2]);
    my $bash = (grep { -x } map { "$_/bash" } split(/:/, $req->{env}{PATH} // $ENV{PATH} // '/usr/bin:/bin'), '/bin', '/usr/bin')[0];
    fail('no_bash', 'bash is missing in the sandbox') unless $bash;
    my ($oom0, $pids0) = counters();
    my ($status, $how) = run($dir, $req->{env} // {}, 0, [$bash, '-c', $req->{cmd}], $req->{stdin}, $req->{out}, $req->{err}, $req->{timeout_ms}, $req->{grace_ms}, $req->{stop});
    my ($oom1, $pids1) = counters();
    my $res = { term => $how, oom => $oom1 - $oom0, pids => $pids1 - $pids0 };
    if ($status & 127) { $res->{signal} = $status & 127 } else { $res->{exit} = $status >> 8 }
    unlink $req->{stdin} if $req->{stdin};
    reply($res);
}
if ($op eq 'grep') {
    my $p = resolve($req->{path}, 1);
    my @st = stat($p) or fail_errno($req->{path});
    fail('invalid', "$req->{path} is neither a regular file nor a directory") unless S_ISDIR($st[2]) || S_ISREG($st[2]);
    my $isdir = S_ISDIR($st[2]) ? 1 : 0;
    # Searched from inside what was resolved, by a relative name.
    my ($cwd, $target) = $isdir ? ($p, '.') : (($p =~ s{/[^/]+$}{}r) || '/', $p =~ s{.*/}{}r);
    my @argv = (@{ $req->{argv} }, '--', $target);
    my ($status) = run($cwd, { LC_ALL => 'C', PATH => $ENV{PATH} // '/usr/local/bin:/usr/bin:/bin' }, 1, \@argv, undef, $req->{out}, $req->{err}, 30000, 0);
    my $errtext = '';
    if (open(my $f, '<', $req->{err})) { local $/; $errtext = <$f> // ''; close $f }
    unlink $req->{err};
    reply({ isdir => $isdir, exit => ($status & 127) ? -1 : $status >> 8, stderr => substr($errtext, 0, 500), target => $target });
}
if ($op eq 'read') {
    # The output of a running command, from where the driver got to.
    my @out;
    for my $r (@{ $req->{reads} }) {
        my ($data, $size) = ('', 0);
        if (open(my $f, '<', $r->{path})) {
            binmode $f;
            $size = (stat($f))[7];
            seek($f, $r->{offset}, 0);
            read($f, $data, $req->{max});
            close $f;
        }
        push @out, { data => MIME::Base64::encode_base64($data, ''), size => $size + 0 };
    }
    reply({ reads => \@out });
}
fail('invalid', "unknown op $op");
