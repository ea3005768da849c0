use super::*;

#[test]
fn a_layer_is_told_once_per_change_and_removed_with_its_jail() {
    let t = tempfile::tempdir().unwrap();
    let project = t.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("a"), "a\n").unwrap();
    let layers = Layers::create(t.path(), Some(&project)).unwrap();
    let mode = std::fs::metadata(layers.dir()).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o711);
    let layer = layers.layer(true).unwrap();
    let dir = PathBuf::from(layer.vars()[0].1.clone());
    // An upper directory as the jail's tmpfs holds it (here on the host).
    std::fs::create_dir_all(dir.join("upper")).unwrap();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let upper = rustix::fs::open(dir.join("upper"), flags, Mode::empty()).unwrap();
    assert!(
        layer
            .changed(std::slice::from_ref(&upper), diff::Bounds::default())
            .is_none()
    );
    std::fs::write(dir.join("upper/a"), "b\n").unwrap();
    let told = layer
        .changed(std::slice::from_ref(&upper), diff::Bounds::default())
        .unwrap();
    assert_eq!(told.summary(), "1 file changed, +1 -1");
    assert!(
        layer
            .changed(std::slice::from_ref(&upper), diff::Bounds::default())
            .is_none()
    );
    // Found on the host, where no jail mounted the layer: refused.
    let me = rustix::fs::open(
        "/proc/self",
        OFlags::PATH | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let refused = layer.open_uppers(&me).unwrap_err();
    assert!(refused.to_string().contains("not mounted"), "{refused}");
    // The overlay's work directory as the kernel leaves it: mode 0.
    std::fs::create_dir_all(dir.join("work/work")).unwrap();
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

#[test]
fn a_layer_holds_its_reservation_and_a_holder_can_keep_it() {
    let t = tempfile::tempdir().unwrap();
    let layers = Layers::create(t.path(), None).unwrap().bounded(100);
    let layer = layers.layer(false).unwrap();
    layer.reserve(&layers, 60).unwrap();
    assert!(layers.reserve(41).is_err());
    // A fork keeping its source's tmpfs alive holds its layer, and with
    // it its reservation (session/jail.rs).
    let layer = Arc::new(layer);
    let kept = Arc::clone(&layer);
    drop(layer);
    assert_eq!(layers.pool().held(), (60, 1));
    drop(kept);
    assert_eq!(layers.pool().held(), (0, 0));
    assert!(layers.reserve(100).is_ok());
}
