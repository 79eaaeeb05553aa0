extends Node2D
# Builds the demo scene from the launch flags: --n_agents reach agents, then the sync node last,
# so that in every physics frame the agents move before the sync node reports on them (Godot
# calls _physics_process in tree order).

const Agent = preload("res://agent.gd")
const Sync = preload("res://sync.gd")


func _ready() -> void:
	var args: Dictionary = Sync.parse_args()
	var n_agents := int(args.get("n_agents", "4"))
	var max_steps := int(args.get("max_steps", "50"))
	var action_type: String = args.get("action_type", "continuous")
	var image_size := int(args.get("image_size", "0"))
	var problems := []
	if n_agents < 1:
		problems.append("--n_agents=%s: must be at least 1" % args.get("n_agents"))
	if max_steps < 1:
		problems.append("--max_steps=%s: must be at least 1" % args.get("max_steps"))
	if not action_type in ["continuous", "discrete"]:
		problems.append("--action_type=%s: must be continuous or discrete" % action_type)
	if image_size < 0 or image_size > 64:
		problems.append("--image_size=%s: must be 0 (no image) to 64" % args.get("image_size"))
	if problems:
		printerr("demo game: invalid launch flags: " + PoolStringArray(problems).join("; "))
		OS.exit_code = 2
		get_tree().quit()
		return
	for i in range(n_agents):
		var agent = Agent.new()
		agent.name = "Agent%d" % i
		agent.configure(i, max_steps, action_type == "discrete", image_size)
		add_child(agent)
	var sync = Sync.new()
	sync.name = "Sync"
	add_child(sync)
