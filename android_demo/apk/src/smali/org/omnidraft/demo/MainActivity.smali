# MainActivity: a full-screen WebView on the omnidraft web app.
#
# URL: the intent extra "url" if given (then remembered in SharedPreferences "omnidraft"; an empty
# extra forgets it), else the remembered one, else @string/server_url.  Java equivalent:
#
#   protected void onCreate(Bundle b) {
#       super.onCreate(b);
#       web = new WebView(this);
#       web.getSettings().setJavaScriptEnabled(true);
#       web.getSettings().setDomStorageEnabled(true);   // the app keeps its settings in localStorage
#       web.setWebViewClient(new ShellClient());        // links stay inside; error page when unreachable
#       setContentView(web);
#       web.loadUrl(resolveUrl());
#   }
.class public Lorg/omnidraft/demo/MainActivity;
.super Landroid/app/Activity;
.source "MainActivity.smali"

.field private web:Landroid/webkit/WebView;


.method public constructor <init>()V
    .registers 1
    invoke-direct {p0}, Landroid/app/Activity;-><init>()V
    return-void
.end method


.method protected onCreate(Landroid/os/Bundle;)V
    .registers 6
    # v0 url, v1 web view, v2 settings, v3 true / client; p0 = v4 (this), p1 = v5 (bundle)
    invoke-super {p0, p1}, Landroid/app/Activity;->onCreate(Landroid/os/Bundle;)V

    invoke-direct {p0}, Lorg/omnidraft/demo/MainActivity;->resolveUrl()Ljava/lang/String;
    move-result-object v0

    new-instance v1, Landroid/webkit/WebView;
    invoke-direct {v1, p0}, Landroid/webkit/WebView;-><init>(Landroid/content/Context;)V
    iput-object v1, p0, Lorg/omnidraft/demo/MainActivity;->web:Landroid/webkit/WebView;

    invoke-virtual {v1}, Landroid/webkit/WebView;->getSettings()Landroid/webkit/WebSettings;
    move-result-object v2
    const/4 v3, 0x1
    invoke-virtual {v2, v3}, Landroid/webkit/WebSettings;->setJavaScriptEnabled(Z)V
    invoke-virtual {v2, v3}, Landroid/webkit/WebSettings;->setDomStorageEnabled(Z)V

    new-instance v3, Lorg/omnidraft/demo/ShellClient;
    invoke-direct {v3}, Lorg/omnidraft/demo/ShellClient;-><init>()V
    invoke-virtual {v1, v3}, Landroid/webkit/WebView;->setWebViewClient(Landroid/webkit/WebViewClient;)V

    invoke-virtual {p0, v1}, Lorg/omnidraft/demo/MainActivity;->setContentView(Landroid/view/View;)V
    invoke-virtual {v1, v0}, Landroid/webkit/WebView;->loadUrl(Ljava/lang/String;)V
    return-void
.end method


# String resolveUrl(): extra "url" > SharedPreferences "url" > @string/server_url
.method private resolveUrl()Ljava/lang/String;
    .registers 7
    # v0 prefs, v1 extra / package name, v2 "url", v3 editor / resources, v4-v5 scratch; p0 = v6
    const-string v0, "omnidraft"
    const/4 v1, 0x0
    invoke-virtual {p0, v0, v1}, Lorg/omnidraft/demo/MainActivity;->getSharedPreferences(Ljava/lang/String;I)Landroid/content/SharedPreferences;
    move-result-object v0

    const-string v2, "url"
    invoke-virtual {p0}, Lorg/omnidraft/demo/MainActivity;->getIntent()Landroid/content/Intent;
    move-result-object v1
    invoke-virtual {v1, v2}, Landroid/content/Intent;->getStringExtra(Ljava/lang/String;)Ljava/lang/String;
    move-result-object v1
    if-eqz v1, :use_saved

    invoke-interface {v0}, Landroid/content/SharedPreferences;->edit()Landroid/content/SharedPreferences$Editor;
    move-result-object v3
    invoke-virtual {v1}, Ljava/lang/String;->isEmpty()Z
    move-result v4
    if-eqz v4, :remember
    invoke-interface {v3, v2}, Landroid/content/SharedPreferences$Editor;->remove(Ljava/lang/String;)Landroid/content/SharedPreferences$Editor;
    move-result-object v3
    invoke-interface {v3}, Landroid/content/SharedPreferences$Editor;->apply()V
    goto :use_saved

    :remember
    invoke-interface {v3, v2, v1}, Landroid/content/SharedPreferences$Editor;->putString(Ljava/lang/String;Ljava/lang/String;)Landroid/content/SharedPreferences$Editor;
    move-result-object v3
    invoke-interface {v3}, Landroid/content/SharedPreferences$Editor;->apply()V
    return-object v1

    :use_saved
    # default = getString(getResources().getIdentifier("server_url", "string", getPackageName()))
    invoke-virtual {p0}, Lorg/omnidraft/demo/MainActivity;->getResources()Landroid/content/res/Resources;
    move-result-object v3
    invoke-virtual {p0}, Lorg/omnidraft/demo/MainActivity;->getPackageName()Ljava/lang/String;
    move-result-object v1
    const-string v4, "server_url"
    const-string v5, "string"
    invoke-virtual {v3, v4, v5, v1}, Landroid/content/res/Resources;->getIdentifier(Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;)I
    move-result v4
    invoke-virtual {v3, v4}, Landroid/content/res/Resources;->getString(I)Ljava/lang/String;
    move-result-object v4
    invoke-interface {v0, v2, v4}, Landroid/content/SharedPreferences;->getString(Ljava/lang/String;Ljava/lang/String;)Ljava/lang/String;
    move-result-object v0
    return-object v0
.end method


# A new intent while running (launchMode singleTask, e.g. `am start ... -e url X`): adopt it and reload.
.method protected onNewIntent(Landroid/content/Intent;)V
    .registers 4
    # v0 web view, v1 url; p0 = v2, p1 = v3
    invoke-super {p0, p1}, Landroid/app/Activity;->onNewIntent(Landroid/content/Intent;)V
    invoke-virtual {p0, p1}, Lorg/omnidraft/demo/MainActivity;->setIntent(Landroid/content/Intent;)V
    iget-object v0, p0, Lorg/omnidraft/demo/MainActivity;->web:Landroid/webkit/WebView;
    if-eqz v0, :done
    const-string v1, "url"
    invoke-virtual {p1, v1}, Landroid/content/Intent;->hasExtra(Ljava/lang/String;)Z
    move-result v1
    if-eqz v1, :done
    invoke-direct {p0}, Lorg/omnidraft/demo/MainActivity;->resolveUrl()Ljava/lang/String;
    move-result-object v1
    invoke-virtual {v0, v1}, Landroid/webkit/WebView;->loadUrl(Ljava/lang/String;)V
    :done
    return-void
.end method


# Back goes back inside the web view while it can.
.method public onBackPressed()V
    .registers 3
    # v0 web view, v1 flag; p0 = v2
    iget-object v0, p0, Lorg/omnidraft/demo/MainActivity;->web:Landroid/webkit/WebView;
    if-eqz v0, :leave
    invoke-virtual {v0}, Landroid/webkit/WebView;->canGoBack()Z
    move-result v1
    if-eqz v1, :leave
    invoke-virtual {v0}, Landroid/webkit/WebView;->goBack()V
    return-void
    :leave
    invoke-super {p0}, Landroid/app/Activity;->onBackPressed()V
    return-void
.end method
