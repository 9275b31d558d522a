# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Generated from daemons/spur_hpc/proto/slurm.proto by tools/gen_module_utils.py: do not edit; change the source and run the tool.
"""The text of slurm.proto, for the modules' copy of wire.protocodec (parse_proto)."""

TEXT = """\
// Public API of Spur: clients (CLI, Ansible modules) and agents talk to the controller,
// the controller talks to agents. Field numbers are never reused; new fields are appended.
syntax = "proto3";

package spur.v1;

// ---------------------------------------------------------------- common

message PingRequest {}

message PingReply {
  string version = 1;
  string build = 2;
  string role = 3;          // leader | follower | candidate | agent
  string leader = 4;        // gRPC address of the leader, when known
  string cluster_name = 5;
  string cluster_id = 6;
  int64 term = 7;
  int64 commit_index = 8;
  int64 applied_index = 9;
  int32 wal_level = 10;     // cluster-wide enabled WAL level
  int32 max_wal_level = 11; // highest level this binary can read
  string raft_addr = 12;
  string grpc_addr = 13;
  string hostname = 14;     // the host the daemon runs on (scontrol ping names the controller by it, as Slurm)
}

message ClusterInfoRequest {}

message MemberInfo {
  string raft_addr = 1;
  string grpc_addr = 2;
  string version = 3;
  string build = 4;
  int32 max_wal_level = 5;
}

message ClusterInfo {
  string cluster_name = 1;
  string cluster_id = 2;
  string leader = 3;          // raft address of the leader
  string leader_grpc = 4;
  int64 term = 5;
  repeated MemberInfo members = 6;
  int32 wal_level = 7;
  int64 next_job_id = 8;
}

// ---------------------------------------------------------------- nodes

enum NodeState {
  NODE_STATE_UNKNOWN = 0;
  IDLE = 1;
  MIXED = 2;
  ALLOCATED = 3;
  DRAINING = 4;
  DRAINED = 5;
  DOWN = 6;
}

message NodeResources {
  int32 cpus = 1;
  int64 memory_mb = 2;
  map<string, int64> gres = 3;  // counted resources an agent declares ([agent] gres: gpu=2), or allocated
}

message RunningJob {
  int64 job_id = 1;
  int32 attempt = 2;
  int32 supervisor_pid = 3;
}

message Node {
  string name = 1;
  NodeState state = 2;
  string reason = 3;
  string reason_set_by = 4;
  double reason_time = 5;
  string address = 6;         // agent gRPC address
  NodeResources resources = 7;
  NodeResources allocated = 8;
  repeated int64 job_ids = 9;
  string version = 10;
  string build = 11;
  bool registered = 12;
  double last_registered = 13;
  double last_heartbeat = 14; // as seen by the answering controller (leader only)
  string partition = 15;
  bool drain = 16;            // administrative drain flag (DRAINING or DRAINED)
  repeated string features = 17;  // [agent] features: what --constraint matches
  repeated string partitions = 18;  // every partition the node is in, configured order ([partitions.NAME]); partition = the first
  double agent_started = 19;      // spurd's start as it registered (Slurm's SlurmdStartTime)
  double boot_time = 20;          // the host's boot, epoch seconds, as its agent reports it
  string arch = 21;               // the agent host's machine (uname -m)
  string os = 22;                 // the agent host's system, release and version (uname -s -r -v)
  int32 sockets = 23;             // CPU layout as the agent reports it (0 = unknown: CPUs sockets of 1 core)
  int32 cores_per_socket = 24;
  int32 threads_per_core = 25;
  double last_busy = 26;          // when it last ran a job (Slurm's LastBusyTime); 0 = never
  double dispatch_hold_until = 27;  // its agent is restarting: no new job or step is sent to it before this (0 = none)
}

message RegisterAgentRequest {
  string name = 1;
  string address = 2;
  NodeResources resources = 3;
  string version = 4;
  string build = 5;
  repeated RunningJob running = 6;  // jobs whose supervisors this agent holds
  double agent_started = 7;         // wall clock of the agent's start (epoch seconds)
  string partition = 8;
  repeated string features = 9;
  double boot_time = 10;
  string arch = 11;
  string os = 12;
  int32 sockets = 13;
  int32 cores_per_socket = 14;
  int32 threads_per_core = 15;
}

message RegisterAgentReply {
  Node node = 1;
  int64 heartbeat_interval_ms = 2;
  repeated RunningJob stale = 3;    // attempts the controller no longer runs: the agent kills them
}

message HeartbeatRequest {
  string name = 1;
  repeated RunningJob running = 2;
}

message HeartbeatReply {
  bool reregister = 1;              // controller does not know this node: register again
  repeated RunningJob stale = 2;
}

message DeregisterAgentRequest {
  string name = 1;
  string reason = 2;
}

message DeregisterAgentReply {
  Node node = 1;
}

message ListNodesRequest {
  repeated string names = 1;
  repeated NodeState states = 2;
}

message ListNodesReply {
  repeated Node nodes = 1;
}

// spurd is about to restart (a rolling upgrade in place): the scheduler sends nothing new to the node until it
// registers again or hold_secs pass (at most [controller] heartbeat_timeout_secs). Its drain and state stay as they are.
message HoldDispatchRequest {
  string name = 1;
  double hold_secs = 2;
}

message GetNodeRequest {
  string name = 1;
}

message DrainNodeRequest {
  string name = 1;
  string reason = 2;
  string set_by = 3;
}

message ResumeNodeRequest {
  string name = 1;
  // Only clear a drain whose reason starts with this prefix (empty: any drain).
  string only_if_reason_prefix = 2;
}

message UpdateNodeRequest {
  string name = 1;
  NodeState state = 2;   // DRAINED (drain), IDLE (resume) or DOWN
  string reason = 3;
  string set_by = 4;
}

// ---------------------------------------------------------------- jobs

enum JobState {
  JOB_STATE_UNKNOWN = 0;
  PENDING = 1;
  RUNNING = 2;
  COMPLETED = 3;
  FAILED = 4;
  CANCELLED = 5;
  TIMEOUT = 6;
  NODE_FAIL = 7;
  OUT_OF_MEMORY = 8;  // the job's cgroup hit its memory limit (Slurm's OUT_OF_MEMORY)
  DEADLINE = 9;       // still pending, or running, at its --deadline
  SUSPENDED = 10;     // scontrol suspend: its processes stopped (SIGSTOP), its resources still held
  REQUEUED = 11;      // accounting only (JobHistory): an earlier run of a job that was requeued after it
  PREEMPTED = 12;     // qos_priority preemption in cancel mode ended it (Slurm's JOB_PREEMPTED)
}

// ---------------------------------------------------------------- partitions

// One partition as spur.conf's [partitions.NAME] configures it (or as the agents' [agent] partition implies it).
message Partition {
  string name = 1;
  repeated string nodes = 2;      // node names, expanded, in configured order
  string nodes_expr = 3;          // as configured: a hostlist expression, or ALL
  bool is_default = 4;            // Default=YES: a job without -p goes here
  int64 max_time_secs = 5;        // 0 = UNLIMITED
  int64 default_time_secs = 6;    // 0 = the partition's MaxTime
  int32 max_nodes = 7;            // 0 = UNLIMITED
  int32 min_nodes = 8;
  string state = 9;               // UP | DOWN | DRAIN | INACTIVE
  bool hidden = 10;               // left out of listings unless -a/--all
  int32 priority_tier = 11;
  int32 priority_job_factor = 12;
  string preempt_mode = 13;       // off | cancel | requeue: what happens to a job here that qos_priority preempts
}

message ListPartitionsRequest {
  repeated string names = 1;      // empty: every partition
}

message ListPartitionsReply {
  repeated Partition partitions = 1;
}

message JobSpec {
  string name = 1;
  string script = 2;
  string user = 3;
  int32 uid = 4;
  int32 gid = 5;
  string work_dir = 6;
  string stdout_path = 7;
  string stderr_path = 8;
  int32 nodes = 9;
  int32 tasks = 10;
  int32 cpus_per_task = 11;
  int64 memory_mb = 12;        // per node; 0 = none requested
  int64 time_limit_secs = 13;  // 0 = no limit
  map<string, string> environment = 14;
  string partition = 15;
  string account = 16;
  // Wave 2: the sbatch/srun/salloc option surface (docs/cli.md: honoured, recorded only, refused).
  string comment = 17;
  bool hold = 18;                 // -H: submitted held (reason JobHeldUser)
  string nodelist = 19;           // -w: a hostlist expression of nodes the job must have
  string exclude = 20;            // -x: a hostlist expression of nodes the job must not have
  bool exclusive = 21;            // --exclusive: no other job shares its nodes
  int32 ntasks_per_node = 22;
  int64 mem_per_cpu_mb = 23;      // --mem-per-cpu; 0 = not given (memory_mb then applies)
  string gres = 24;               // --gres as written: name[:type]:count[,...] per node
  string gpus = 25;               // --gpus=[type:]N for the whole job
  string gpus_per_node = 26;
  string gpus_per_task = 27;
  string constraint = 28;         // --constraint: node features, & and | as in Slurm
  string open_mode = 29;          // append | truncate ("" = truncate)
  int32 signal_number = 30;       // --signal=[B:]SIG[@secs]: 0 = none
  int32 signal_secs = 31;         // seconds before the time limit (Slurm's default 60)
  bool signal_batch_only = 32;    // B: the batch shell only, not its steps
  string wckey = 33;
  string qos = 34;
  double begin_time = 35;         // --begin, epoch seconds; 0 = now
  double deadline = 36;           // --deadline, epoch seconds; 0 = none
  int64 time_min_secs = 37;
  int32 requeue = 38;             // 0 = the cluster's default, 1 = --requeue, 2 = --no-requeue
  int32 nice = 39;
  string mail_type = 40;
  string mail_user = 41;
  repeated string argv = 42;      // the batch script's arguments
  string array = 43;              // --array as written (validated by the controller): 0-15:2%4
  string dependency = 44;         // --dependency as written: afterok:12:13,singleton (or ? between)
  bool kill_on_invalid_dep = 45;
  string submit_host = 46;
  string cluster_name = 47;       // -M as resolved by the client (this cluster's name)
  bool interactive = 48;          // salloc, or srun outside an allocation: no batch step; the client's steps run in it
  string command = 49;            // the batch script's absolute path as sbatch read it (Slurm's Command); "" for --wrap or stdin
  string alloc_node = 50;         // the submitting host as the controller resolved the client's address (Slurm's AllocNode)
  int32 alloc_sid = 51;           // the submitting process's session id (Slurm's AllocNode:Sid); 0 = unknown
}

message Job {
  int64 job_id = 1;
  JobSpec spec = 2;
  JobState state = 3;
  string reason = 4;
  int32 exit_code = 5;
  int32 signal = 6;
  double submit_time = 7;
  double start_time = 8;
  double end_time = 9;
  repeated string nodes = 10;
  int32 attempt = 11;
  bool cancel_requested = 12;
  int32 supervisor_pid = 13;
  bool held = 14;
  // Arrays: a task's own record has array_job_id (the array's id) and array_task_id; the array's record
  // keeps the tasks not split off yet in array_pending (hostlist-style ranges, "" when none are left).
  int64 array_job_id = 15;        // 0 = not part of an array
  int32 array_task_id = 16;
  string array_pending = 17;
  int32 array_max_running = 18;   // the %N throttle; 0 = none
  int32 restart_count = 19;       // SLURM_RESTART_COUNT: requeues after the job had started
  double eligible_time = 20;
  repeated Step steps = 21;       // the job's steps ("batch", "0", "1", ...): squeue -s, scontrol show step
  int64 priority = 22;            // the scheduler's priority, higher first (squeue %Q, scontrol Priority=)
  double suspend_time = 23;       // when it was last suspended or resumed (Slurm's SuspendTime); 0 = never
  double suspended_secs = 24;     // time spent suspended so far: not run time
  map<string, NodeAllocation> allocs = 25;  // per node: the CPU ids, memory and gres units it holds (scontrol -d)
  int32 cancelled_by_uid = 26;    // Slurm's requid: the authenticated uid of who cancelled it; -1 = nobody did
  int64 preempted_by = 27;        // the job whose start preempted this one (cancel or requeue); 0 = none
  double preempt_time = 28;       // when it was last preempted; 0 = never
}

// One job step (docs/controller.md "Steps"): the batch script is step "batch", each srun step "0", "1", ...
message Step {
  string step_id = 1;
  string name = 2;
  JobState state = 3;
  repeated string nodes = 4;
  int32 tasks = 5;
  int32 cpus_per_task = 6;
  int32 exit_code = 7;            // the largest of its tasks'
  int32 signal = 8;
  double start_time = 9;
  double end_time = 10;
  int32 attempt = 11;             // the job attempt the step runs in
  string reason = 12;
}

message SubmitJobRequest {
  JobSpec spec = 1;
  string idempotency_key = 2;  // a retry with the same key returns the first job
  bool test_only = 3;          // --test-only: validate and say where and when it would start; submit nothing
}

message SubmitJobReply {
  int64 job_id = 1;
  bool duplicate = 2;
  double start_estimate = 3;   // test_only: epoch seconds
  repeated string nodes = 4;   // test_only: the nodes it would get
}

message ListJobsRequest {
  repeated int64 job_ids = 1;
  repeated string users = 2;
  repeated JobState states = 3;
  repeated string partitions = 4;
  repeated string names = 5;
  bool include_finished = 6;
  bool brief = 7;  // leave out each job's script and environment (squeue and scancel show neither)
}

message ListJobsReply {
  repeated Job jobs = 1;
}

message GetJobRequest {
  int64 job_id = 1;
}

message CancelJobRequest {
  int64 job_id = 1;
  int32 signal = 2;      // 0 = cancel (kill the whole job); otherwise deliver this signal only
  string requested_by = 3;
  string array_tasks = 4;  // "" = the job (a whole array when job_id is an array's); "3" or "1-3,7": those tasks
  string step_id = 5;      // "" = the job; "0", "1", ...: that step only (scancel N.M, srun's Ctrl-C)
}

message CancelJobReply {
  Job job = 1;
  bool already_finished = 2;
}

message CompleteJobRequest {
  int64 job_id = 1;
  int32 attempt = 2;
  string node = 3;
  int32 exit_code = 4;
  int32 signal = 5;
  JobState state = 6;     // COMPLETED, FAILED, CANCELLED or TIMEOUT as seen by the supervisor
  double end_time = 7;
  string reason = 8;      // why the supervisor could not run the job, when it could not
}

message CompleteJobReply {
  bool accepted = 1;      // false: stale attempt, already recorded
}

message HoldJobRequest {
  int64 job_id = 1;
  string requested_by = 2;
}

message ReleaseJobRequest {
  int64 job_id = 1;
  string requested_by = 2;
}

// scontrol update JobId=N Field=value ...: only the fields named in `fields` (JobSpec field names) change.
message UpdateJobRequest {
  int64 job_id = 1;
  repeated string fields = 2;
  JobSpec spec = 3;
  string requested_by = 4;
}

// scontrol requeue / requeuehold: a running or finished batch job goes back to PENDING.
message RequeueJobRequest {
  int64 job_id = 1;
  bool hold = 2;
  string requested_by = 3;
}

// Job history from accounting (sacct). Times are epoch seconds; 0 = not given (Slurm's defaults apply).
message JobHistoryRequest {
  repeated int64 job_ids = 1;
  repeated string users = 2;
  double start_time = 3;
  double end_time = 4;
  repeated string states = 5;   // Slurm state names or short codes (CD, F, PD, R, ...)
  bool all_clusters = 6;        // false: this cluster's id only
  repeated string names = 7;    // job names (sacct --name)
}

// srun inside an allocation: a step on (some of) the job's nodes. Needs WAL level 3.
message CreateStepRequest {
  int64 job_id = 1;
  int32 tasks = 2;                // -n (0 = the job's task count)
  int32 nodes = 3;                // -N (0 = as many as the tasks need, at most the job's)
  int32 cpus_per_task = 4;        // -c (0 = 1)
  int32 ntasks_per_node = 5;
  repeated string argv = 6;       // the command each task runs
  map<string, string> environment = 7;
  string work_dir = 8;
  string io_address = 9;          // host:port of srun's I/O listener: every spurstepd of the step connects there
  string io_token = 10;           // what each spurstepd sends first (srun refuses any other connection)
  string name = 11;               // -J (default: the command's name)
  string stdout_path = 12;        // --output: tasks write files instead of streaming (patterns of model.output_file)
  string stderr_path = 13;
  bool kill_on_bad_exit = 14;     // -K: a task exiting non-zero kills the step
  string nodelist = 15;           // -w: a hostlist of the job's nodes the step must use
  string cpu_bind = 16;           // --cpu-bind: recorded only
}

message CreateStepReply {
  Step step = 1;
  Job job = 2;                    // the allocation (brief)
}

// A spurd reports that its part of a step ended (one report per node of the step).
message CompleteStepRequest {
  int64 job_id = 1;
  int32 attempt = 2;
  string step_id = 3;
  string node = 4;
  JobState state = 5;
  int32 exit_code = 6;            // the largest of this node's tasks'
  int32 signal = 7;
  double end_time = 8;
  string reason = 9;
}

message CompleteStepReply {
  bool accepted = 1;
}

// salloc (and srun outside an allocation) ends its interactive allocation when its command exits.
message EndAllocationRequest {
  int64 job_id = 1;
  int32 exit_code = 2;
  int32 signal = 3;
}

// scontrol suspend / resume (operators and admins): SIGSTOP / SIGCONT to every process of a running job.
message SuspendJobRequest {
  int64 job_id = 1;
  bool resume = 2;
  string requested_by = 3;
}

message SetWalLevelRequest {
  int32 level = 1;
}

message SetWalLevelReply {
  int32 level = 1;
  bool changed = 2;
}

// ---------------------------------------------------------------- accounts, QOS, priority (issue 22)
// The association store is replicated state (WAL level 5): sacctmgr changes it through the leader, the scheduler
// reads it under the state lock and never waits on the database; the accounting database holds a copy.
// Limits: a TRES map names cpu, mem (MB), node, gres/gpu (gres/NAME); a key absent = no limit. Counts: -1 = no limit.

message Qos {
  string name = 1;
  string description = 2;
  int64 priority = 3;                  // Priority: the QOS factor, and what qos_priority preemption compares
  repeated string preempt = 4;         // QOS names a job of this QOS may preempt
  string preempt_mode = 5;             // "" (unset: the victim's partitions decide), off, cancel, requeue
  map<string, int64> grp_tres = 6;     // GrpTRES over every running job of the QOS
  int32 grp_jobs = 7;                  // GrpJobs: running jobs of the QOS
  int32 grp_submit_jobs = 8;           // GrpSubmitJobs: pending + running
  int32 max_jobs_per_user = 9;         // MaxJobsPerUser: running
  int32 max_submit_jobs_per_user = 10; // MaxSubmitJobsPerUser: pending + running
  int64 max_wall_secs = 11;            // MaxWall per job; -1 = none
  map<string, int64> max_tres_per_job = 12;
  map<string, int64> max_tres_per_user = 13;
  double usage_factor = 14;            // UsageFactor: scales the usage a job of this QOS charges (default 1)
  repeated string flags = 15;          // DenyOnLimit, NoDecay, ... as sacctmgr takes them
  int64 id = 16;
}

message Account {
  string name = 1;
  string description = 2;
  string organization = 3;
  string parent = 4;                   // "" only for root
  repeated string coordinators = 5;
}

message User {
  string name = 1;
  string default_account = 2;
  string admin_level = 3;              // None | Operator | Administrator (sacctmgr's AdminLevel)
  string default_wckey = 4;
}

// One association: an account's own (user = "") or a user's in an account (optionally per partition).
message Association {
  int64 id = 1;
  string cluster = 2;
  string account = 3;
  string user = 4;
  string partition = 5;
  string parent_account = 6;           // for an account's association: its parent; for a user's: the account
  int32 shares = 7;                    // Fairshare (raw shares), default 1
  map<string, int64> grp_tres = 8;
  int32 grp_jobs = 9;
  int32 grp_submit_jobs = 10;
  int32 max_jobs = 11;                 // MaxJobs: running jobs per user of this association
  int32 max_submit_jobs = 12;
  int64 max_wall_secs = 13;            // MaxWall per job; -1 = none
  map<string, int64> max_tres_per_job = 14;
  repeated string qos = 15;            // the QOS it may use; empty = inherited from the parent
  string default_qos = 16;             // "" = inherited
  int64 priority = 17;                 // the association's priority factor (Slurm's Priority), 0 = none
  double raw_usage = 18;               // decayed usage (TRES-billing seconds) as of the reply
}

message ListAssociationsRequest {
  repeated string users = 1;           // empty: every user the caller may see ([auth] private_data "usage")
  repeated string accounts = 2;
}

message ListAssociationsReply {
  string cluster = 1;
  repeated Qos qos = 2;
  repeated Account accounts = 3;
  repeated User users = 4;
  repeated Association associations = 5;
}

// One sacctmgr command as its user typed it, parsed into Slurm's words (lower case keys); the leader resolves
// it against the store, checks it, and writes the result as one record. Hostile: every key, value and count
// is checked by the controller.
message ModifyAssociationsRequest {
  string verb = 1;                     // add | modify | delete
  string entity = 2;                   // account | user | qos | cluster
  repeated string names = 3;           // the objects named without a key (sacctmgr add account a,b)
  map<string, string> where = 4;       // selection: name, account, user, partition, cluster, parent ...
  map<string, string> set = 5;         // values: fairshare, grptres, maxjobs, qos (a "+"/"-" prefix adds/removes) ...
  bool dry_run = 6;                    // say what would change, change nothing (sacctmgr's question before -i)
}

message ModifyAssociationsReply {
  repeated string affected = 1;        // one line per object changed, as sacctmgr lists them
  bool changed = 2;
  string message = 3;                  // "Nothing modified", ...
}

message PriorityWeights {
  int64 age = 1;
  int64 fairshare = 2;
  int64 job_size = 3;
  int64 partition = 4;
  int64 qos = 5;
  int64 assoc = 6;
}

// sprio: one pending job's priority and its factors (each normalised 0..1; sprio prints factor * weight).
message JobPriority {
  int64 job_id = 1;
  string user = 2;
  string account = 3;
  string partition = 4;
  string qos = 5;
  int64 priority = 6;                  // the job's priority as the scheduler orders by it
  double age = 7;
  double fairshare = 8;
  double job_size = 9;
  double partition_factor = 10;
  double qos_factor = 11;
  double assoc_factor = 12;
  int64 nice = 13;
}

message ListPrioritiesRequest {
  repeated int64 job_ids = 1;
  repeated string users = 2;
}

message ListPrioritiesReply {
  string priority_type = 1;            // basic | multifactor
  PriorityWeights weights = 2;
  repeated JobPriority jobs = 3;
}

// sshare: one association's shares and usage.
message Share {
  string account = 1;
  string user = 2;
  string partition = 3;
  int32 raw_shares = 4;
  double norm_shares = 5;
  double raw_usage = 6;
  double norm_usage = 7;
  double effective_usage = 8;
  double fairshare = 9;                // the fair-share factor 0..1
  int32 depth = 10;                    // 0 = root; sshare indents by it
  string parent = 11;
  map<string, int64> grp_tres_mins = 12;
  map<string, double> tres_usage_raw = 13;
}

message ListSharesRequest {
  repeated string users = 1;
  repeated string accounts = 2;
  bool all_users = 3;                  // sshare -a
}

message ListSharesReply {
  repeated Share shares = 1;
}

// ---------------------------------------------------------------- controller membership (issue 23)

message RaftMember {
  string raft_addr = 1;
  string grpc_addr = 2;
  string role = 3;                     // leader | follower | candidate | learner | unreachable
  bool voter = 4;                      // false while a joining member catches up
  int64 match_index = 5;               // the leader's view of its log; 0 when unknown
  int64 applied_index = 6;
  int64 lag = 7;                       // the leader's commit index minus match_index
  string version = 8;
  string build = 9;
}

message RaftStatusRequest {}

message RaftStatusReply {
  repeated RaftMember members = 1;     // the committed membership, a joining member included
  int64 term = 2;
  int64 commit_index = 3;
  string leader = 4;                   // the leader's raft address
  string change_in_flight = 5;         // "" or what is being changed ("add 127.0.0.4:7001")
}

message ChangeMembershipRequest {
  string action = 1;                   // add | remove
  string raft_addr = 2;
  string grpc_addr = 3;                // add: where the new member serves gRPC
  double catch_up_timeout_secs = 4;    // add: not promoted unless caught up by then; 0 = the default
}

message ChangeMembershipReply {
  repeated RaftMember members = 1;
  string message = 2;
}

service SlurmController {
  rpc Ping(PingRequest) returns (PingReply);
  rpc GetClusterInfo(ClusterInfoRequest) returns (ClusterInfo);
  rpc RegisterAgent(RegisterAgentRequest) returns (RegisterAgentReply);
  rpc Heartbeat(HeartbeatRequest) returns (HeartbeatReply);
  rpc DeregisterAgent(DeregisterAgentRequest) returns (DeregisterAgentReply);
  rpc ListNodes(ListNodesRequest) returns (ListNodesReply);
  rpc GetNode(GetNodeRequest) returns (Node);
  rpc DrainNode(DrainNodeRequest) returns (Node);
  rpc ResumeNode(ResumeNodeRequest) returns (Node);
  rpc UpdateNode(UpdateNodeRequest) returns (Node);
  rpc SubmitJob(SubmitJobRequest) returns (SubmitJobReply);
  rpc ListJobs(ListJobsRequest) returns (ListJobsReply);
  rpc GetJob(GetJobRequest) returns (Job);
  rpc CancelJob(CancelJobRequest) returns (CancelJobReply);
  rpc CompleteJob(CompleteJobRequest) returns (CompleteJobReply);
  rpc SetWalLevel(SetWalLevelRequest) returns (SetWalLevelReply);
  rpc JobHistory(JobHistoryRequest) returns (ListJobsReply);
  rpc HoldJob(HoldJobRequest) returns (Job);        // needs WAL level 2
  rpc ReleaseJob(ReleaseJobRequest) returns (Job);  // needs WAL level 2
  rpc UpdateJob(UpdateJobRequest) returns (Job);    // needs WAL level 3
  rpc RequeueJob(RequeueJobRequest) returns (Job);  // needs WAL level 3
  rpc CreateStep(CreateStepRequest) returns (CreateStepReply);        // needs WAL level 3
  rpc CompleteStep(CompleteStepRequest) returns (CompleteStepReply);  // agents only
  rpc EndAllocation(EndAllocationRequest) returns (Job);              // the owner of an interactive job
  rpc ListPartitions(ListPartitionsRequest) returns (ListPartitionsReply);
  rpc SuspendJob(SuspendJobRequest) returns (Job);                    // needs WAL level 4; operators and admins
  rpc HoldDispatch(HoldDispatchRequest) returns (Node);               // needs WAL level 4; agents and admins
  rpc ListAssociations(ListAssociationsRequest) returns (ListAssociationsReply);        // sacctmgr show
  rpc ModifyAssociations(ModifyAssociationsRequest) returns (ModifyAssociationsReply);  // needs WAL level 5; admins
  rpc ListPriorities(ListPrioritiesRequest) returns (ListPrioritiesReply);              // sprio
  rpc ListShares(ListSharesRequest) returns (ListSharesReply);                          // sshare
  rpc RaftStatus(RaftStatusRequest) returns (RaftStatusReply);                          // spur admin raft status
  rpc ChangeMembership(ChangeMembershipRequest) returns (ChangeMembershipReply);        // admins; one at a time
}

// ---------------------------------------------------------------- agent

message AgentPingReply {
  string node = 1;
  string version = 2;
  string build = 3;
  bool registered = 4;
  repeated RunningJob running = 5;
}

message LaunchJobRequest {
  Job job = 1;           // job_id, attempt and spec are used
  NodeAllocation alloc = 2;  // what the controller gave the job on this node (enforced by spurstepd)
}

// One node's share of a job, decided by the controller and kept in the job record (alloc.per_node), so a
// restarted spurd or controller never hands the same CPU or device to two jobs.
message NodeAllocation {
  int32 cpus = 1;
  int64 memory_mb = 2;              // 0 = the job asked for no memory: no cap
  repeated int32 cpu_ids = 3;       // indices into the node's usable CPUs (empty: not chosen, before WAL level 3)
  repeated GresUnits gres = 4;      // exact units of each counted resource
  bool chosen = 5;                  // cpu_ids / gres units were chosen by the controller
}

message GresUnits {
  string key = 1;                   // gpu, gpu:a100, ...
  repeated int32 indices = 2;       // unit indices of that key on the node ([agent] gres_files order)
}

message LaunchJobReply {
  int32 supervisor_pid = 1;
  bool already_running = 2;
}

message SignalJobRequest {
  int64 job_id = 1;
  int32 attempt = 2;     // 0 = whatever attempt runs
  int32 signal = 3;      // 0 = cancel: kill the whole job tree
  string step_id = 4;    // "" = the batch step; "0", "1", ...: that step's supervisor on this node
  bool suspend = 5;      // scontrol suspend (signal SIGSTOP) / resume (SIGCONT): the time limit stops meanwhile
}

message SignalJobReply {
  bool delivered = 1;
}

// The leader starts one node's part of a step: that node's tasks under a spurstepd of their own.
message LaunchStepRequest {
  Job job = 1;                    // job_id, attempt, nodes and spec (the allocation: user, work_dir, environment)
  Step step = 2;                  // step_id, name, nodes, tasks, cpus_per_task
  repeated int32 task_ids = 3;    // the global task ids (SLURM_PROCID) that run on this node
  int32 node_index = 4;           // SLURM_NODEID: this node's place in step.nodes
  CreateStepRequest request = 5;  // argv, environment, work_dir, I/O address and token, output paths
  NodeAllocation alloc = 6;       // the job's share of this node: the step's cgroup lives inside those limits
}

message LaunchStepReply {
  int32 supervisor_pid = 1;
  bool already_running = 2;
}

service SlurmAgent {
  rpc Ping(PingRequest) returns (AgentPingReply);
  rpc LaunchJob(LaunchJobRequest) returns (LaunchJobReply);
  rpc SignalJob(SignalJobRequest) returns (SignalJobReply);
  rpc LaunchStep(LaunchStepRequest) returns (LaunchStepReply);
}
"""
