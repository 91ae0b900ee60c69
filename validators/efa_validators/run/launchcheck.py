"""Does the log describe the job the runner started? A program that prints a recorded NCCL log would
otherwise pass as a pre-flight of this cluster (issue 10.7).

What the launcher was asked to start (world size, hosts) is read from its command line and the env the
runner runs in; what the log claims comes from NCCL's line heads (`host:pid:tid [dev] NCCL ...`) and the
world size NCCL printed. They must agree:
- no more ranks in the log's world than the launcher started, no more hosts than it spans;
- a launch that stays on this host (mpirun without hosts, torchrun's local workers) prints only this
  host's name (NCCL prints gethostname() up to the first '.': NCCL src/misc/utils.cc getHostName);
- every pid a line claims for this host is a process the run started (a descendant of its command, as
  the runner lists them while it runs): one real pid among invented ones proves nothing;
- a rank on another host is accounted for only by the launcher the run started itself (its argv, not
  a process name seen in the tree: a decoy `ssh` or a nested `mpirun` proves nothing) and only on a host
  that launcher was given (mpirun -H/--hostfile or its default hostfile, srun -w or SLURM_JOB_NODELIST);
- a plain command that started no launcher (no mpirun, srun, ssh... among its processes) cannot have
  ranks on other hosts.
A contradiction fails the run; what cannot be accounted for leaves the check unknown (never a pass).
Pure functions: the runner passes what it saw.
"""

import os
import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from efa_validators.judge.shortlist import few
from efa_validators.run import launchers

# processes that can put ranks on other hosts: their presence in a plain command's tree allows it
REMOTE_STARTERS = frozenset(
    "mpirun mpiexec orterun prterun prte prted orted srun slurmstepd ssh rsh pdsh clush kubectl "
    "hydra_pmi_proxy pmi_proxy mpiexec.hydra torchrun docker enroot pyxis".split()
)
# Open MPI options that take one value (two for --mca): the rest of the line starts at the program
_MPI_VALUE_OPTS = {
    "-np": 1, "--np": 1, "-n": 1, "-c": 1, "-H": 1, "-host": 1, "--host": 1, "-hostfile": 1,
    "--hostfile": 1, "-machinefile": 1, "--machinefile": 1, "-N": 1, "-npernode": 1, "--npernode": 1,
    "-map-by": 1, "--map-by": 1, "-bind-to": 1, "--bind-to": 1, "-rank-by": 1, "--rank-by": 1, "-x": 1,
    "-wdir": 1, "--wdir": 1, "-cwd": 1, "--prefix": 1, "-rf": 1, "--rankfile": 1, "--output-filename": 1,
    "-mca": 2, "--mca": 2, "-gmca": 2, "--gmca": 2, "--personality": 1, "--launch-agent": 1,
}  # fmt: skip
_SRUN_VALUE_OPTS = dict.fromkeys(
    "-N -n -w -p -A -t -c -G --nodes --ntasks --ntasks-per-node --nodelist --mpi --gpus-per-node".split(), 1
)
_TORCHRUN_VALUE_OPTS = dict.fromkeys(
    "--nnodes --nproc-per-node --nproc_per_node --node-rank --node_rank --master-addr --master_addr "
    "--master-port --master_port --rdzv-backend --rdzv_backend --rdzv-endpoint --rdzv_endpoint --rdzv-id "
    "--rdzv_id --tee -t --max-restarts --max_restarts --log-dir --log_dir --role --monitor-interval "
    "--local-addr --log-line-prefix-template --redirects -r".split(),
    1,
)
_SLURM_ENV_HOSTS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
# where mpirun finds hosts without -H (mpi-operator sets OMPI_MCA_orte_default_hostfile; PBS, LSF)
_OTHER_HOSTFILE_ENV = (
    "OMPI_MCA_orte_default_hostfile",
    "PRTE_MCA_prte_default_hostfile",
    "PBS_NODEFILE",
    "LSB_DJOB_HOSTFILE",
)


class Launch(NamedTuple):
    world: Optional[int]  # ranks the launcher was asked to start (None: not said)
    nhosts: Optional[int]  # hosts it spans at most (None: not said)
    hosts: Tuple[str, ...]  # host names it was given (empty: none)
    local: Optional[bool]  # True: every rank on this host; False: may be elsewhere; None: not known
    said: str  # where the figures come from, for the finding
    started: bool = True  # the run's own command is this launcher (False: a plain command)

    def facts(self) -> Dict[str, object]:
        """What the report records of the launch (`run.launch`), beside the launcher's argv and pid."""
        return {"world": self.world, "nhosts": self.nhosts, "hosts": list(self.hosts[:MAX_HOSTS_SHOWN]),
                "hosts_given": len(self.hosts), "local": self.local, "from": self.said}  # fmt: skip


MAX_HOSTS_SHOWN = 64
MAX_HOSTLIST = 65536  # hosts a Slurm host list may expand to (n[1-100000] is refused, not expanded)


def _int(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    text = text.strip()
    if ":" in text:  # torchrun --nnodes MIN:MAX, srun -N MIN-MAX: the most it may be
        text = text.rsplit(":", 1)[1]
    if "-" in text:
        text = text.rsplit("-", 1)[1]
    return int(text) if text.isdigit() else None


def _options(words: Sequence[str], value_opts: Dict[str, int]) -> Dict[str, str]:
    """`-k v`, `--key=v` and `--key v` pairs up to the program (the first bare word not a value)."""
    out = {}  # type: Dict[str, str]
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            break
        if word.startswith("--") and "=" in word:
            key, value = word.split("=", 1)
            out[key] = value
            i += 1
            continue
        takes = value_opts.get(word, 0)
        if takes and i + takes < len(words):
            out[word] = " ".join(words[i + 1 : i + 1 + takes])
        i += 1 + takes
    return out


def _hostfile(path: str, folder: Optional[str] = None) -> Tuple[List[str], int]:
    """(hosts, total slots) of an Open MPI hostfile (`host slots=N`, `host:N`, comments)."""
    hosts, slots = [], 0  # type: List[str], int
    from efa_validators.run.smallfile import NotAFile, read_small

    try:  # bounded: a FIFO named as the hostfile is no hang, a huge one no flood
        lines = read_small(os.path.join(folder or "", path)).decode("utf-8", "replace").splitlines()
    except (OSError, NotAFile):
        return [], 0
    for line in lines:
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        name, _, count = words[0].partition(":")
        n = _int(count) if count else None
        for w in words[1:]:
            if w.startswith(("slots=", "max_slots=")) and n is None:
                n = _int(w.split("=", 1)[1])
        if name not in hosts:
            hosts.append(name)
        slots += n or 0
    return hosts, slots


def _mpirun(words: Sequence[str], env: Dict[str, str]) -> Launch:
    opts = _options(words, _MPI_VALUE_OPTS)
    world = _int(next((opts[k] for k in ("-np", "--np", "-n", "-c") if k in opts), None))
    hosts = []  # type: List[str]
    slots = 0
    for key in ("-H", "-host", "--host"):
        for item in (opts.get(key) or "").split(","):
            name, _, count = item.partition(":")
            if name and name not in hosts:
                hosts.append(name)
            slots += _int(count) or 1 if name else 0
    for key in ("-hostfile", "--hostfile", "-machinefile", "--machinefile"):
        if key in opts:
            got, got_slots = _hostfile(opts[key])
            hosts += [h for h in got if h not in hosts]
            slots += got_slots
    said = "mpirun " + " ".join("%s %s" % (k, v) for k, v in sorted(opts.items()) if k in _COUNTED)
    if hosts:
        return Launch(world or slots or None, len(hosts), tuple(hosts), _only_here(hosts), said)
    if any(env.get(v) for v in _SLURM_ENV_HOSTS):  # mpirun in a Slurm allocation spans its nodes
        return Launch(world, _int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")),
                      _slurm_env_hosts(env), False, said + " in a Slurm allocation")  # fmt: skip
    for var in _OTHER_HOSTFILE_ENV:
        if env.get(var):
            got = tuple(_hostfile(env[var])[0])
            return Launch(world, len(got) or None, got, False, said + " with a default hostfile")
    return Launch(world, 1, (), True, said or "mpirun with no hosts: this host only")


_COUNTED = ("-np", "--np", "-n", "-c", "-H", "-host", "--host", "-hostfile", "--hostfile", "-machinefile",
            "--machinefile", "-N", "--npernode")  # fmt: skip
_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def _only_here(hosts: Sequence[str]) -> Optional[bool]:
    """True when every host named is this one (its name or loopback), else None (not known)."""
    here = local_host()
    return True if all(h in _LOCAL_NAMES or short(h) == here for h in hosts) else None


def _srun(words: Sequence[str], env: Dict[str, str]) -> Launch:
    opts = _options(words, _SRUN_VALUE_OPTS)
    nodes = _int(opts.get("-N") or opts.get("--nodes"))
    tasks = _int(opts.get("-n") or opts.get("--ntasks"))
    per_node = _int(opts.get("--ntasks-per-node"))
    if nodes is None and tasks is None:  # inside an allocation srun takes its size
        nodes = _int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES"))
        tasks = _int(env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS"))
    if tasks is None and nodes is not None and per_node is not None:
        tasks = nodes * per_node
    said = "srun" + "".join(" %s %s" % (k, v) for k, v in sorted(opts.items()) if k in
                             ("-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node"))  # fmt: skip
    given = opts.get("-w") or opts.get("--nodelist")
    hosts = tuple(expand_hostlist(given)) if given else _slurm_env_hosts(env)
    return Launch(tasks, nodes, hosts, None, said if said != "srun" else "srun in its Slurm allocation")


def _slurm_env_hosts(env: Dict[str, str]) -> Tuple[str, ...]:
    for var in _SLURM_ENV_HOSTS:
        if env.get(var):
            return tuple(expand_hostlist(env[var]))
    return ()


_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(text: str) -> List[str]:
    """Slurm's host list form (`a1,n[1-3,7],gpu-[01-02]`) -> names, bounded by MAX_HOSTLIST (the rest is
    left out: a host not listed is only unproven, never a pass). Slurm's hostlist syntax:
    SchedMD/slurm src/common/hostlist.c (hostlist_create: comma-separated, `[lo-hi,...]` ranges keep
    the zero padding of `lo`)."""
    out, have = [], set()  # type: List[str], Set[str]
    for item in _split_top(text):
        stack = [item]
        while stack and len(out) < MAX_HOSTLIST:
            name = stack.pop()
            m = _BRACKET.search(name)
            if m is None:
                if name and name not in have:
                    have.add(name)
                    out.append(name)
                continue
            head, tail = name[: m.start()], name[m.end() :]
            expanded = []  # type: List[str]
            for part in m.group(1).split(","):
                lo, _, hi = part.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()):
                    continue
                for n in range(int(lo), min(int(hi or lo), int(lo) + MAX_HOSTLIST) + 1):
                    expanded.append("%s%0*d%s" % (head, len(lo), n, tail))
                    if len(expanded) >= MAX_HOSTLIST:
                        break
            stack.extend(reversed(expanded))
    return out


def _split_top(text: str) -> List[str]:
    """Commas outside brackets split a host list."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return [i for i in items if i]


def _torchrun(words: Sequence[str]) -> Launch:
    """torchrun starts its workers on this host only; the world spans --nnodes such hosts."""
    opts = _options(words, _TORCHRUN_VALUE_OPTS)
    nnodes = _int(opts["--nnodes"]) if "--nnodes" in opts else 1  # torchrun's default, and --standalone's
    nproc = _int(opts.get("--nproc-per-node") or opts.get("--nproc_per_node"))
    world = nnodes * nproc if nnodes is not None and nproc is not None else None
    return Launch(world, nnodes, (), True, "torchrun --nnodes %s --nproc-per-node %s" % (nnodes, nproc))


def declared(argv: Sequence[str], kind: str, env: Dict[str, str], nodes: Optional[int]) -> Launch:
    """What the launcher was asked to start, from its argv and env; `--nodes` bounds the hosts too."""
    positions = launchers._program_positions(argv)
    words = list(argv[positions[-1] + 1 :]) if positions else []
    if kind == "mpirun":
        launch = _mpirun(words, env)
    elif kind == "srun":
        launch = _srun(words, env)
    elif kind == "torchrun":
        if "torch.distributed.run" in words:  # python -m torch.distributed.run ...
            words = words[words.index("torch.distributed.run") + 1 :]
        launch = _torchrun(words)
    else:
        launch = Launch(None, None, (), None, "a plain command", started=False)
    if nodes is not None and launch.nhosts is None:
        launch = launch._replace(nhosts=nodes, said=launch.said + ", --nodes %d" % nodes)
    return launch


def short(host: str) -> str:
    """A host name as NCCL prints it: up to the first '.', lower case for comparing."""
    return host.split(".", 1)[0].lower()


def known_names(given: Iterable[str]) -> Set[str]:
    """The names a log may print (NCCL's short gethostname()) for the hosts a launcher was given: each
    one's short name, and for an IPv4 address EC2's default host name for it (`ip-10-1-0-11` for 10.1.0.11:
    AWS EC2 User Guide, "Amazon EC2 instance hostname types", IP name)."""
    names = set()  # type: Set[str]
    for host in given:
        parts = host.split(".")
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            names.add("ip-" + "-".join(parts))
        names.add(short(host))
    return names


def local_host() -> str:
    import socket

    return short(socket.gethostname())


def compare(
    launch: Launch,
    claims: Dict[str, Set[int]],
    world: Optional[int],
    ranks_seen: Optional[int],
    pids: Set[int],
    commands: Iterable[str],
    here: str,
) -> Tuple[str, List[str], List[str]]:
    """(status pass|fail|unknown, contradictions or, when unknown, what fell short, what agreed) between the
    launch and the log's claims.

    `claims`: host -> pids from NCCL line heads; `world`: the world size NCCL printed; `pids`: the run's
    local processes; `commands`: their names; `here`: this host as NCCL prints it. Fewer ranks or hosts in
    the log than the launch started is never a pass (issue 23, item 1): output is missing, or the log is
    another job's."""
    bad, good, fewer = [], [], []  # type: List[str], List[str], List[str]
    hosts = sorted(claims)
    if not hosts:
        return "unknown", [], []
    mine = [h for h in hosts if short(h) == here]
    others = [h for h in hosts if short(h) != here]
    most = max(x for x in (world, ranks_seen, 0) if x is not None)
    if launch.world is not None and most > launch.world:
        bad.append("the log claims %d ranks; %s starts %d" % (most, launch.said, launch.world))
    elif launch.world is not None and world is not None and world < launch.world:
        fewer.append("the log's world is %d ranks; %s starts %d" % (world, launch.said, launch.world))
    elif launch.world is not None and world is not None:
        good.append("world size %d" % world)
    if launch.nhosts is not None and launch.local is not True and len(hosts) > launch.nhosts:
        bad.append("the log claims %d hosts (%s); %s spans %d" % (len(hosts), few(hosts), launch.said,
                                                                 launch.nhosts))  # fmt: skip
    elif launch.nhosts is not None and launch.local is not True and len(hosts) < launch.nhosts:
        fewer.append("the log claims %d host(s) (%s); %s spans %d" % (len(hosts), few(hosts), launch.said,
                                                                      launch.nhosts))  # fmt: skip
    elif launch.nhosts is not None and launch.local is not True:
        good.append("%d host(s)" % len(hosts))
    if launch.local is True and others:
        bad.append("the ranks run on this host (%s) but the log claims %s" % (here, few(others)))
    if not launch.started and others:
        started = sorted(set(commands) & REMOTE_STARTERS)
        if not started:
            bad.append("the command started no launcher (no mpirun, srun, ssh...) yet the log claims "
                       "ranks on %s" % few(others))  # fmt: skip
        else:  # a process name is no proof: any program can be called ssh, or run mpirun beside a recording
            fewer.append("the run's command is no launcher (%s only ran inside it): ranks on %s are "
                         "unproven" % (few(started), few(others)))  # fmt: skip
    elif launch.local is not True and others:
        given = known_names(launch.hosts)
        unknown_hosts = [h for h in others if short(h) not in given]
        if not launch.hosts:
            fewer.append("%s was given no host list: ranks on %s are unproven" % (launch.said, few(others)))
        elif unknown_hosts:
            fewer.append("the log names host(s) %s that %s was not given (%s)"
                         % (few(unknown_hosts), launch.said, few(list(launch.hosts))))  # fmt: skip
        else:
            good.append("hosts given to the launcher")
    for host in mine:
        claimed = claims[host]
        strange = sorted(claimed - pids)
        if claimed and len(strange) == len(claimed):
            bad.append("the log's lines from %s name pids %s; the run started none of them"
                       % (host, few([str(p) for p in strange])))  # fmt: skip
        elif strange:
            bad.append("the log's lines from %s name pids %s that the run did not start (beside %s it did)"
                       % (host, few([str(p) for p in strange]),
                          few(sorted(str(p) for p in claimed & pids))))  # fmt: skip
        elif claimed:
            good.append("pids on %s" % host)
    if bad:
        return "fail", bad, good
    if fewer:
        return "unknown", fewer, good
    return ("pass" if good else "unknown"), [], good
