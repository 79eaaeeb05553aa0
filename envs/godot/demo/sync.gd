extends Node
# The game's side of the training connection: Godot RL Agents' wire protocol (godot_rl 0.8.2
# core/godot_env.py and the plugin's sync.gd), written for this demo, plus ppo_dict's optional
# fields. envs/godot/protocol.py documents the protocol; in short:
#
#   trainer listens on 127.0.0.1:<port>; the game connects (--port=<port>).
#   every message: 4-byte little-endian length, then that many bytes of UTF-8 JSON
#   (StreamPeer.put_utf8_string / get_utf8_string frame exactly so).
#   trainer -> game: handshake, env_info, reset, action, call, close.
#   game -> trainer: env_info, reset (obs), step (obs, reward, done), call (returns).
#
# ppo_dict's additions, which trainers that do not know them ignore:
#   reset may carry "seed": agent i's RNG is reseeded with seed + i before it resets.
#   step replies carry "truncated" (per agent: the episode hit its time limit) and, when an
#   episode ended, "terminal_obs" (per agent: its last observation, or null). The sync resets a
#   finished agent at once, so "obs" already holds the next episode's first observation
#   (gymnasium's auto-reset, as ppo_dict and sb3 expect). The plugin instead lets the game reset
#   the agent on a later frame and reports the last observation of the episode as "obs".
#
# Launch flags (OS.get_cmdline_args, --key=value, as the plugin reads them): --port,
# --env_seed (agent i starts with seed env_seed + i), --speedup (physics frames per second =
# 60 x speedup, and time scale), --action_repeat (physics frames per action).

const MAJOR_VERSION := "0"
const MINOR_VERSION := "7"
const DEFAULT_PORT := 11008
const CONNECT_TIMEOUT_MS := 20000

var stream := StreamPeerTCP.new()
var agents := []
var action_repeat := 8
var n_frames := 0
var need_to_send_obs := false
var stopped := false


static func parse_args() -> Dictionary:
	# {"port": "12345", ...} from --key=value flags; the engine's own flags have no "=".
	var args := {}
	for arg in OS.get_cmdline_args():
		if arg.begins_with("--") and arg.find("=") > 2:
			var key_value: PoolStringArray = arg.substr(2, arg.length() - 2).split("=", true, 1)
			args[key_value[0]] = key_value[1]
	return args


func _ready() -> void:
	var args := parse_args()
	var port := int(args.get("port", str(DEFAULT_PORT)))
	var env_seed := int(args.get("env_seed", "0"))
	var speedup := int(args.get("speedup", "1"))
	action_repeat = int(args.get("action_repeat", "8"))
	if action_repeat < 1 or speedup < 1:
		_stop(2, "--action_repeat and --speedup must be at least 1, got %d and %d" % [action_repeat, speedup])
		return
	# As the plugin does: more physics frames per real second, each still 1/60 s of game time.
	Engine.iterations_per_second = 60 * speedup
	Engine.time_scale = speedup
	# Headless (nothing to draw), Godot 3 sleeps low_processor_mode_sleep_usec after every main-loop
	# iteration, which caps the game at about one physics frame per millisecond: 11x slower here.
	OS.low_processor_usage_mode_sleep_usec = 0
	agents = get_tree().get_nodes_in_group("AGENT")
	for i in range(agents.size()):
		agents[i].seed_rng(env_seed + i)
		agents[i].reset()
	if not _connect(port):
		_stop(3, "could not connect to the trainer at 127.0.0.1:%d" % port)
		return
	var handshake := _receive()
	if stopped:
		return
	if handshake.get("type") != "handshake" or str(handshake.get("major_version")) != MAJOR_VERSION:
		_stop(4, "expected a handshake with major_version %s, got %s" % [MAJOR_VERSION, JSON.print(handshake)])
		return
	# The trainer asks for env_info right after the handshake (godot_env.py _get_env_info).
	var request := _receive()
	if stopped:
		return
	if request.get("type") != "env_info":
		_stop(4, "expected an env_info request after the handshake, got %s" % JSON.print(request))
		return
	_send(_env_info())


func _connect(port: int) -> bool:
	if stream.connect_to_host("127.0.0.1", port) != OK:
		return false
	var start := OS.get_ticks_msec()
	while stream.get_status() == StreamPeerTCP.STATUS_CONNECTING:
		if OS.get_ticks_msec() - start > CONNECT_TIMEOUT_MS:
			return false
		OS.delay_msec(1)
	stream.set_no_delay(true)
	return stream.get_status() == StreamPeerTCP.STATUS_CONNECTED


func _physics_process(_delta: float) -> void:
	# Every action_repeat frames: report on the last action, then serve messages until the next
	# action arrives (blocking: the game waits for the trainer, as the plugin's sync does).
	if stopped:
		return
	n_frames += 1
	if n_frames % action_repeat != 0:
		return
	if need_to_send_obs:
		need_to_send_obs = false
		_send_step_reply()
	_serve_until_action()


func _serve_until_action() -> void:
	while not stopped:
		var message := _receive()
		if stopped:
			return
		var kind = message.get("type")
		if kind == "env_info":
			_send(_env_info())
		elif kind == "reset":
			var reset_seed = message.get("seed")
			for i in range(agents.size()):
				if reset_seed != null:
					agents[i].seed_rng(int(reset_seed) + i)
				agents[i].reset()
			_send({"type": "reset", "obs": _all_obs()})
		elif kind == "action":
			var actions: Array = message["action"]
			if actions.size() != agents.size():
				_stop(5, "got %d actions for %d agents" % [actions.size(), agents.size()])
				return
			for i in range(agents.size()):
				agents[i].set_action(actions[i])
			need_to_send_obs = true
			return
		elif kind == "call":
			var returns := []
			for agent in agents:
				returns.append(agent.call(message["method"]) if agent.has_method(message["method"]) else null)
			_send({"type": "call", "returns": returns})
		elif kind == "close":
			_stop(0, "")
			return
		else:
			_stop(5, "unknown message type in %s" % JSON.print(message))
			return


func _env_info() -> Dictionary:
	var observation_space := []
	var action_space := []
	var policy_names := []
	for agent in agents:
		observation_space.append(agent.get_obs_space())
		action_space.append(agent.get_action_space())
		policy_names.append("shared_policy")
	return {
		"type": "env_info",
		"n_agents": agents.size(),
		"observation_space": observation_space,
		"action_space": action_space,
		"agent_policy_names": policy_names,
	}


func _all_obs() -> Array:
	var obs := []
	for agent in agents:
		obs.append(agent.get_obs())
	return obs


func _send_step_reply() -> void:
	var obs := []
	var reward := []
	var done := []
	var truncated := []
	var terminal_obs := []
	var any_done := false
	for agent in agents:
		var agent_done: bool = agent.get_done()
		reward.append(agent.get_reward())
		agent.zero_reward()
		done.append(agent_done)
		truncated.append(agent.truncated)
		if agent_done:
			any_done = true
			terminal_obs.append(agent.get_obs())
			agent.reset()
		else:
			terminal_obs.append(null)
		obs.append(agent.get_obs())
	var reply := {"type": "step", "obs": obs, "reward": reward, "done": done, "truncated": truncated}
	if any_done:
		reply["terminal_obs"] = terminal_obs
	_send(reply)


func _send(message: Dictionary) -> void:
	stream.put_utf8_string(JSON.print(message))


func _receive() -> Dictionary:
	var text := stream.get_utf8_string()
	if stream.get_status() != StreamPeerTCP.STATUS_CONNECTED:
		_stop(1, "the trainer closed the connection")
		return {}
	var parsed := JSON.parse(text)
	if parsed.error != OK or typeof(parsed.result) != TYPE_DICTIONARY:
		_stop(5, "message is not a JSON object: %s" % text.substr(0, 200))
		return {}
	return parsed.result


func _stop(code: int, why: String) -> void:
	if why:
		printerr("demo game: " + why)
	stopped = true
	stream.disconnect_from_host()
	OS.exit_code = code
	get_tree().quit()
