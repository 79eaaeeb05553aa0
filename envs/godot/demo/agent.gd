extends Node2D
# One reach agent: a point on the square [-1, 1]^2 that moves toward a goal placed at random.
#
# Its interface to sync.gd follows Godot RL Agents' AIController (get_obs, get_obs_space,
# get_action_space, set_action, get_reward, get_done, set_done_false, reset), plus ppo_dict's
# `truncated` flag (the episode hit the time limit rather than the goal) and a per-agent RNG
# (seeded with seed + agent index, as ppo_dict seeds env i with seed + i).
#
# Observation "obs" (4 floats): position x, y and (goal - position) / 2, all in [-1, 1].
# Optional "2d" (--image_size=n): an n x n x 1 uint8 image, 255 where the agent is, 128 the goal.
# Actions: continuous "move" (2 floats in [-1, 1], velocity), or discrete "move_x", "move_y"
# (3 each: 0 = -1, 1 = stay, 2 = +1).
# Reward: SHAPING per unit of distance gained, plus BONUS on reaching the goal (episode ends,
# terminated); after max_steps decisions the episode ends truncated.

const SPEED := 2.0  # units per second of game time
const DT := 1.0 / 60.0  # one physics frame of game time; fixed so that results do not depend on the frame rate
const GOAL_RADIUS := 0.1
const MIN_START_DISTANCE := 0.5
const SHAPING := 10.0
const BONUS := 1.0

var index := 0
var max_steps := 50
var discrete := false
var image_size := 0
var rng := RandomNumberGenerator.new()
var pos := Vector2()
var goal := Vector2()
var velocity := Vector2()
var n_steps := 0  # decisions (actions received) in this episode
var reward := 0.0  # accumulated since the last report
var done := false
var truncated := false
var _distance := 0.0


func configure(agent_index: int, episode_steps: int, discrete_actions: bool, image: int) -> void:
	index = agent_index
	max_steps = episode_steps
	discrete = discrete_actions
	image_size = image


func _ready() -> void:
	add_to_group("AGENT")


func seed_rng(value: int) -> void:
	rng.seed = value


func reset() -> void:
	pos = Vector2(rng.randf_range(-1.0, 1.0), rng.randf_range(-1.0, 1.0))
	goal = Vector2(rng.randf_range(-1.0, 1.0), rng.randf_range(-1.0, 1.0))
	while pos.distance_to(goal) < MIN_START_DISTANCE:
		goal = Vector2(rng.randf_range(-1.0, 1.0), rng.randf_range(-1.0, 1.0))
	velocity = Vector2()
	n_steps = 0
	reward = 0.0
	done = false
	truncated = false
	_distance = pos.distance_to(goal)


func _physics_process(_delta: float) -> void:
	# One frame of the current action; an agent whose episode ended waits for the sync to reset it.
	if done:
		return
	pos.x = clamp(pos.x + velocity.x * DT, -1.0, 1.0)
	pos.y = clamp(pos.y + velocity.y * DT, -1.0, 1.0)
	var distance := pos.distance_to(goal)
	reward += SHAPING * (_distance - distance)
	_distance = distance
	if distance < GOAL_RADIUS:
		reward += BONUS
		done = true


func set_action(action: Dictionary) -> void:
	n_steps += 1
	if discrete:
		velocity = Vector2(int(action["move_x"]) - 1, int(action["move_y"]) - 1) * SPEED
	else:
		var move: Array = action["move"]
		velocity = Vector2(clamp(float(move[0]), -1.0, 1.0), clamp(float(move[1]), -1.0, 1.0)) * SPEED


func get_reward() -> float:
	return reward


func zero_reward() -> void:
	reward = 0.0


func get_done() -> bool:
	if not done and n_steps >= max_steps:
		done = true
		truncated = true
	return done


func set_done_false() -> void:
	done = false


func get_obs() -> Dictionary:
	var obs := {"obs": [pos.x, pos.y, (goal.x - pos.x) / 2.0, (goal.y - pos.y) / 2.0]}
	if image_size > 0:
		obs["2d"] = _render().hex_encode()
	return obs


func _render() -> PoolByteArray:
	# Row-major [H, W, 1]: row 0 is y = -1.
	var pixels := PoolByteArray()
	pixels.resize(image_size * image_size)
	for i in range(pixels.size()):
		pixels[i] = 0
	pixels[_cell(goal)] = 128
	pixels[_cell(pos)] = 255
	return pixels


func _cell(p: Vector2) -> int:
	var col := int(round((p.x + 1.0) / 2.0 * (image_size - 1)))
	var row := int(round((p.y + 1.0) / 2.0 * (image_size - 1)))
	return row * image_size + col


func get_obs_space() -> Dictionary:
	var space := {"obs": {"size": [4], "space": "box"}}
	if image_size > 0:
		space["2d"] = {"size": [image_size, image_size, 1], "space": "box"}
	return space


func get_action_space() -> Dictionary:
	if discrete:
		return {
			"move_x": {"size": 3, "action_type": "discrete"},
			"move_y": {"size": 3, "action_type": "discrete"},
		}
	return {"move": {"size": 2, "action_type": "continuous"}}
