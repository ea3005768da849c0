use super::*;

#[test]
fn a_layer_is_told_once_per_change_and_removed_with_its_jail() {
    let t = tempfile::tempdir().unwrap();
    let project = t.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("a"), "a\n").unwrap();
    let layers = Layers::create(t.path(), &project).unwrap();
    let mode = std::fs::metadata(layers.dir()).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o711);
    let layer = layers.layer(None).unwrap();
    let dir = PathBuf::from(layer.var().1);
    assert!(layer.changed(diff::Bounds::default()).is_none());
    std::fs::write(dir.join("upper/a"), "b\n").unwrap();
    let told = layer.changed(diff::Bounds::default()).unwrap();
    assert_eq!(told.summary(), "1 file changed, +1 -1");
    assert!(layer.changed(diff::Bounds::default()).is_none());
    // The overlay's work directory as the kernel leaves it: mode 0.
    std::fs::create_dir(dir.join("work/work")).unwrap();
    std::fs::set_permissions(
        dir.join("work/work"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    drop(layer);
    for _ in 0..100 {
        if !dir.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!dir.exists());
    let path = layers.dir().to_owned();
    drop(layers);
    assert!(!path.exists());
}
